# Two entry points for a fresh machine (see README), in either order on one clone:
#   make demo  - install dslogs and diagnose one service (sample_logs/concurrent_leak) into dslogs-report.html
#   make test  - install everything the tests need (venv, extras, torch, chromium, jq) and run them
# One install stamp per extras set (.venv/.installed-<extras>): `make test` after `make demo`
# installs what the tests need on top of what the demo installed.
VENV ?= .venv
PY := $(VENV)/bin/python
comma := ,
DEMO_EXTRAS := base
# One service, as a first report should read: a Gradio app serving overlapping sessions, one
# of them leaking (each sample_logs/ folder is a service of its own; all of them together are not).
DEMO_LOGS ?= sample_logs/concurrent_leak
TEST_EXTRAS := test_gpu_hf_spark
# The hf extra leaves torch to you (a pin would replace a user's CUDA build); the tests use
# the CPU wheel, installed explicitly before the extras (pip finds it in its configured index).
TORCH ?= torch==2.13.0

.PHONY: demo test install system-deps lint bench wheels collector-wheel

# $* is the extras set with "_" for ",", or "base" for none.
# The collector is its own distribution (dslogs-collector), which dslogs-llm depends on: both are
# installed editable from the checkout, so an edit to collector/ or analyzer/ is seen at once.
$(VENV)/.installed-%: pyproject.toml packaging/collector/pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(findstring hf,$*),$(PY) -m pip install -q '$(TORCH)')
	$(PY) -m pip install -q -e ./packaging/collector
	$(PY) -m pip install -q -e '.$(if $(filter base,$*),,[$(subst _,$(comma),$*)])'
	touch $@

install: $(VENV)/.installed-$(TEST_EXTRAS)

system-deps:
	bash scripts/install_system_deps.sh

demo: $(VENV)/.installed-$(DEMO_EXTRAS)
	$(VENV)/bin/dslogs analyze $(DEMO_LOGS) --out dslogs-report.html
	$(VENV)/bin/dslogs analyze $(DEMO_LOGS) --format md | head -40

test: system-deps $(VENV)/.installed-$(TEST_EXTRAS)
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .

bench: install
	$(PY) bench/collector_overhead.py
	$(PY) bench/ingest.py
	$(PY) bench/accuracy.py

# Wheels are stamped with the last commit's time, so one commit builds the same bytes anywhere
# (hatchling writes SOURCE_DATE_EPOCH into every entry; outside a git clone, its fixed default).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
BUILD_ENV := $(if $(SOURCE_DATE_EPOCH),SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH))

# dist/dslogs_llm-*.whl (CLI, analyzer, API) and dist/dslogs_collector-*.whl
wheels:
	$(BUILD_ENV) python3 -m pip wheel -q --no-deps -w dist . ./packaging/collector

# dist/dslogs_collector-*.whl: the collector alone, no dependencies, for inference environments
collector-wheel:
	$(BUILD_ENV) python3 -m pip wheel -q --no-deps -w dist ./packaging/collector
