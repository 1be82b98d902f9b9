# Two commands do all set-up on a fresh machine with Python >= 3.11, pip and make:
#   make demo   - create .venv, install the package, print the committed findings, measure
#                 again the claims that take seconds, and run the others as quick pipeline checks
#   make test   - create .venv, install with the dev and hf extras, run the whole suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -n 2

.PHONY: demo test lint docs clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: setup.py | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: setup.py | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,hf]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(PY) -m experiments tour --quick

test: $(VENV)/.installed-dev
	$(PY) -m pytest $(PYTEST_ARGS) --doctest-modules transformer analysis optim experiments tests

$(VENV)/.installed-docs: setup.py | $(PY)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $@

# The API reference from the docstrings (Sphinx, autodoc + napoleon), warnings as errors.
docs: $(VENV)/.installed-docs
	$(PY) -m sphinx -W --keep-going -q -b html docs build/docs
	@echo "docs: build/docs/index.html"

lint: $(VENV)/.installed-dev
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) runs .pytest_cache
