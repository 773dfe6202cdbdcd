# Everything a fresh machine needs comes from this repo's files: a .venv built from requirements.lock.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The local Dagster instance shared by the demo and the UI (runs, partitions, sensor cursors).
export DAGSTER_HOME := $(CURDIR)/storage/dagster_home

.PHONY: setup demo test dev faults clean-storage browser

# -qq: errors only (a pip index configured with missing folders prints a warning per package looked up).
$(STAMP): requirements.lock requirements-nodeps.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -qq --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install -qq --disable-pip-version-check --no-deps -r requirements-nodeps.lock
	$(BIN)/pip install -qq --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m newsmotion_assets.demo

# The studio's browser test drives Debian's chromium (Playwright, pinned in requirements.lock, never
# downloads a browser of its own). Installed here when missing, apt-get exists and we are root (CI on
# a bare machine); otherwise that test is skipped and says why.
browser:
	@if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  echo "installing Debian's chromium for the studio browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
	    || echo "could not install chromium: the studio browser test will be skipped"; \
	fi

test: $(STAMP) browser
	$(BIN)/dagster definitions validate -w workspace.yaml
	$(BIN)/python -m pytest -q

dev: $(STAMP)
	$(BIN)/dagster dev -w workspace.yaml

# Fault test of a private `dagster dev` (its own storage and instance): kills a run worker and the
# daemon, restarts, reports renders completed, retries, temp files left, time to recover.
faults: $(STAMP)
	$(BIN)/python -m benchmarks.faults --portraits 2 --json benchmarks/results/faults.json

clean-storage:
	rm -rf storage/motion storage/personas
	find storage/dagster_home -mindepth 1 ! -name dagster.yaml -exec rm -rf {} +
