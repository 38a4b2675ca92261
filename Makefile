# tailtheory: every target sets up its own virtual environment on first use.
VENV    ?= .venv
PY      := $(CURDIR)/$(VENV)/bin/python
STAMP   := $(VENV)/.installed
FIGS    := $(CURDIR)/figures
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.py))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: repro test test-thorough test-verl bench sync clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # the CPU build; see README
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

## repro: verify every claim (quick profile) and regenerate every figure into figures/
repro: $(STAMP)
	TAILTHEORY_FIGURES=$(FIGS) $(VENV)/bin/tailtheory verify --profile quick
	@for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; \
	  (cd notebooks && TAILTHEORY_FIGURES=$(FIGS) $(PY) $$(basename $$nb)) || exit 1; \
	done

## test: the whole suite, notebooks included (quick preset)
test: $(STAMP)
	$(PY) -m pytest -m "not slow" --nbmake tests notebooks

## test-thorough: slow checks too, Hypothesis at thousands of examples
test-thorough: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest --nbmake tests notebooks

## test-verl: the verl plugin's tests (tests_verl/), in their own .venv-verl: verl 0.9.1 pins
## versions (transformers < 5.11) that clash with .venv's, so tailtheory goes in with --no-deps
VERL_VENV  := .venv-verl
VERL_PY    := $(CURDIR)/$(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.installed

$(VERL_STAMP): pyproject.toml
	python3 -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install -q --upgrade pip
	$(VERL_PY) -m pip install -q torch==2.13.0   # the CPU build, as in .venv
	$(VERL_PY) -m pip install -q verl==0.9.1 pytest
	$(VERL_PY) -m pip install -q --no-deps -e .
	touch $(VERL_STAMP)

test-verl: $(VERL_STAMP)
	$(VERL_PY) -m pytest -q -p no:cacheprovider tests_verl

## bench: speed and memory benchmarks (by hand; not part of the tests)
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'   # TRL, for the side-by-side step benchmark
	@for b in $(sort $(wildcard benchmarks/bench_*.py)); do echo "== $$b"; $(PY) $$b || exit 1; done

## sync: re-pair notebooks/*.ipynb with their py:percent sources
sync: $(STAMP)
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
