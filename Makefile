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

# every issue-14 measure, then one table against its targets (bench/run_all.py); the store and memory
# micro-benchmarks run on their own: bench/bench_store.py, bench/bench_memory.py
bench: $(VENV)/.installed
	$(PY) bench/run_all.py

studio: $(VENV)/.installed
	$(VENV)/bin/langgraph dev --no-browser

schemas: $(VENV)/.installed
	$(TG) schemas --out out/schemas

clean:
	rm -rf $(VENV) .tradegraph .langgraph_api out
