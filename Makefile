# Everything a fresh machine needs comes from this repo's files: a .venv built from requirements.lock.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The local Dagster instance shared by the demo and the UI (runs, partitions, sensor cursors).
export DAGSTER_HOME := $(CURDIR)/storage/dagster_home

.PHONY: setup demo test dev faults clean-storage

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m newsmotion_assets.demo

test: $(STAMP)
	$(BIN)/dagster definitions validate -w workspace.yaml
	$(BIN)/python -m pytest -q

dev: $(STAMP)
	$(BIN)/dagster dev -w workspace.yaml

# Fault test of a private `dagster dev` (its own storage and instance): kills a run worker and the
# daemon, restarts, reports renders completed, retries, temp files left, time to recover.
faults: $(STAMP)
	$(BIN)/python bench/faults.py --portraits 2 --json bench/results/faults.json

clean-storage:
	rm -rf storage/motion storage/personas
	find storage/dagster_home -mindepth 1 ! -name dagster.yaml -exec rm -rf {} +
