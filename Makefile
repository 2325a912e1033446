# Two entry points for a fresh machine (see README):
#   make demo  - install dslogs and diagnose sample_logs/ into dslogs-report.html
#   make test  - install everything the tests need (venv, extras, chromium, jq) and run them
VENV ?= .venv
PY := $(VENV)/bin/python
PIP_EXTRAS ?= test,gpu,hf,spark

.PHONY: demo test install system-deps lint bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(PIP_EXTRAS)]'
	touch $@

install: $(VENV)/.installed

system-deps:
	bash scripts/install_system_deps.sh

demo:
	$(MAKE) install PIP_EXTRAS=test
	$(VENV)/bin/dslogs analyze sample_logs/ --out dslogs-report.html
	$(VENV)/bin/dslogs analyze sample_logs/ --format md | head -40

test: system-deps install
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .

bench: install
	$(PY) bench/collector_overhead.py
	$(PY) bench/ingest.py
	$(PY) bench/accuracy.py
