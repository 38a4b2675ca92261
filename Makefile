# tailtheory: every target sets up its own virtual environment on first use.
VENV    ?= .venv
PY      := $(CURDIR)/$(VENV)/bin/python
STAMP   := $(VENV)/.installed
FIGS    := $(CURDIR)/figures
REPRO   := $(CURDIR)/build/repro
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.py))
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: repro figures test test-cluster test-thorough test-verl bench sync render site lab test-lab docs clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0   # the CPU build; see README
	$(PY) -m pip install -q -e '.[dev,ray,slurm]'   # the executors' tests need Ray and submitit
	@# the kernel under the name the notebooks' metadata gives it, so that JupyterLab does not
	@# rewrite it (ipykernel's own spec says "Python 3 (ipykernel)") when a notebook is saved
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3" >/dev/null
	@# JupyterLab saves the widgets' state with a notebook, so a saved notebook reopened with a
	@# new kernel shows its progress bars and explorers instead of "model not found"
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp notebooks/lab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@# after a save, git's record of a notebook whose committed content did not change is refreshed
	mkdir -p $(VENV)/etc/jupyter
	cp notebooks/jupyter_server_config.py $(VENV)/etc/jupyter/jupyter_server_config.py
	@# `jupyter nbconvert --execute` limits each cell to the notebooks' 300 s (nbclient's default:
	@# none, so a hung cell would wait for ever)
	cp notebooks/jupyter_nbconvert_config.py $(VENV)/etc/jupyter/jupyter_nbconvert_config.py
	@# in a git checkout: strip outputs from notebooks/*.ipynb when committing (.gitattributes
	@# scopes the filter there; the renders in docs/notebooks/ keep theirs). Cell ids are kept,
	@# and the language_info that JupyterLab adds on saving goes too.
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  $(VENV)/bin/nbstripout --install --attributes .gitattributes && \
	  git config filter.nbstripout.clean '"$(PY)" -m nbstripout --keep-id' && \
	  git config diff.ipynb.textconv '"$(PY)" -m nbstripout --keep-id -t' && \
	  git config filter.nbstripout.extrakeys 'metadata.language_info'; \
	fi
	touch $(STAMP)

# verify every claim (quick profile), then run every notebook as a script; figures and
# claims.json into $(1)
define regenerate
TAILTHEORY_FIGURES=$(1) $(VENV)/bin/tailtheory verify --profile quick
@for nb in $(NOTEBOOKS); do \
  echo "== $$nb"; \
  (cd notebooks && TAILTHEORY_FIGURES=$(1) $(PY) $$(basename $$nb)) || exit 1; \
done
endef

## repro: verify every claim and regenerate every figure into the ignored build/repro/, then
## compare with the committed figures/ (the reference): a changed verdict fails; numbers, CSVs
## and PNGs may differ across CPUs and are listed (tailtheory/core/repro.py)
repro: $(STAMP)
	rm -rf $(REPRO)
	$(call regenerate,$(REPRO))
	$(PY) -m tailtheory.core.repro $(FIGS) $(REPRO)

## figures: the same regeneration into the committed figures/, for when the reference is meant
## to change (maintainers; commit the result)
figures: $(STAMP)
	$(call regenerate,$(FIGS))

## test: the whole suite, notebooks included (quick preset); notebook 01 runs once, in the real
## Jupyter kernel of tests/test_notebook_outputs.py (which fails on any error), not a second time
## under nbmake; test-thorough runs it under both. Two pytest workers, one torch thread each
## (TEST_WORKERS=0 runs in one process); the 25 slowest tests are printed at the end
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -m "not slow and not cluster_run" --nbmake tests notebooks --ignore=notebooks/01_token_tail.ipynb \
		-n $(TEST_WORKERS) --dist loadgroup --durations=25

## test-cluster: the study executors on a local Ray instance of 2 CPUs (its start takes seconds)
## and submitit's local executor: a killed worker retried, the same rows under local, ray and
## slurm (tests/experiments/test_executors.py; CI runs it after `make test`)
test-cluster: $(STAMP)
	$(PY) -m pytest -m "cluster_run and not slow" tests/experiments/test_executors.py -p no:xdist

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
	@for w in recipe text qwen3; do echo "== benchmarks/bench_step.py --workload $$w"; \
		$(PY) benchmarks/bench_step.py --workload $$w || exit 1; done

## sync: re-pair notebooks/*.ipynb with their py:percent sources
sync: $(STAMP)
	$(VENV)/bin/jupytext --sync $(NOTEBOOKS)

## render: execute every notebook (quick preset) in a Jupyter kernel into docs/notebooks/*.ipynb,
## outputs and images included (the figures they save refresh figures/, as `make figures` does;
## explorers drawn as static figures, which code hosts can show);
## `make render NB="01 04"` renders some
render: $(STAMP)
	env -u MPLBACKEND TAILTHEORY_WIDGETS=0 $(PY) docs/notebooks/render.py --figures $(FIGS) $(NB)

## docs: regenerate the generated docs from the code and the stored measurements: docs/claims.md
## (the claims registry and paper cards), the module maps of docs/contributing.md (the package
## docstrings) and docs/regime.md (the regime table, results/); the tests fail when any is stale
docs: $(STAMP)
	$(PY) -m tailtheory.docs
	$(PY) -m tailtheory.regime.table

## site: a static report site in build/site/ from the committed ledger, claims.json, figures,
## renders and guide pages docs/*.md, with a navigation beside each page (docs/site/build.py;
## nothing executed; MathJax copied in, no network needed): open build/site/index.html
site: $(STAMP)
	$(PY) docs/site/build.py --out build/site

## lab: JupyterLab on notebooks/ (figures a kernel saves go to the ignored figures/scratch/)
lab: $(STAMP)
	env -u MPLBACKEND $(VENV)/bin/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks/

## test-lab: JupyterLab in headless Chromium: open notebook 01, Run All, see its figures and its
## verdict table; then the report site's pages (not part of `make test`: it installs Debian's
## chromium with apt-get if missing)
test-lab: $(STAMP)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium chromium-driver; }
	@$(PY) -c "import selenium" 2>/dev/null || $(PY) -m pip install -q selenium
	env -u MPLBACKEND TAILTHEORY_TEST_LAB=1 $(PY) -m pytest -p no:cacheprovider -v -s tests/lab

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
