# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TG := $(VENV)/bin/tradegraph
SYMBOLS ?= AAPL,MSFT
AS_OF ?= 2012-06-01

.PHONY: run test test-unit bench studio schemas clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev,studio]"
	touch $@

run: $(VENV)/.installed
	$(TG) run --symbols $(SYMBOLS) --as-of $(AS_OF)

test: $(VENV)/.installed
	$(PY) -m pytest

test-unit: $(VENV)/.installed
	$(PY) -m pytest -m "not integration"

bench: $(VENV)/.installed
	$(PY) bench/bench_cycle.py
	$(PY) bench/bench_store.py
	$(PY) bench/bench_features.py
	$(PY) bench/bench_memory.py

studio: $(VENV)/.installed
	$(VENV)/bin/langgraph dev --no-browser

schemas: $(VENV)/.installed
	$(TG) schemas --out out/schemas

clean:
	rm -rf $(VENV) .tradegraph .langgraph_api out
