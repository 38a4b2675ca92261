# tailtheory: every target sets up its own virtual environment on first use.
VENV    ?= .venv
PY      := $(CURDIR)/$(VENV)/bin/python
STAMP   := $(VENV)/.installed
FIGS    := $(CURDIR)/figures
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.py))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: repro test test-thorough bench sync clean

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

## bench: speed and memory benchmarks (by hand; not part of the tests)
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'   # TRL, for the side-by-side step benchmark
	@for b in $(sort $(wildcard benchmarks/bench_*.py)); do echo "== $$b"; $(PY) $$b || exit 1; done

## sync: re-pair notebooks/*.ipynb with their py:percent sources
sync: $(STAMP)
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
