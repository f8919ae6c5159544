# Two entry points (see README): `make demo` and `make test`. Both install what they need first.
# A third, `make container-test`, builds the image and runs the compose stack (docs/deploy.md).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch. Here `pip install torch==2.13.0` finds the CPU wheel locally; elsewhere pass
# TORCH_INDEX="--index-url https://download.pytorch.org/whl/cpu" (an unpinned torch pulls a CUDA build).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# empty: the demo builds its own dataset from the standard library; DATA=DIR uses a BEIR folder or pairs file
DATA ?=
RUN_DIR ?= var
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install install-dev chromium test-deps demo test demo-check container-test lint typecheck docs serve worker bench-load clean

# `install`: what the service needs (make demo, serve, worker); `install-dev`: that plus the tools and test
# dependencies (the dev and milvus extras, Debian's chromium), for make test, lint, typecheck and docs. The
# demo does not wait for them: they were about a third of its install (issue 44's time to first answer).
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)" $(TORCH_INDEX)
	$(BIN)/python -m pip install --quiet -e . --config-settings editable_mode=compat
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e ".[dev,milvus]" --config-settings editable_mode=compat
	@$(MAKE) --no-print-directory chromium
	touch $@

# headless Chromium for the page's browser tests (tests/app/ui/test_ui_browser.py), from Debian's package:
# playwright's own browser download is not used. Not root: say so; those tests then skip with the reason.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
			|| echo "apt-get could not install chromium: the browser tests will skip (CI fails them)"; \
		else echo "chromium not installed and not root: run 'sudo apt-get install chromium' for the browser tests (they skip without it)"; fi; }

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

# the demo prints its time to first answer from here, install included (scripts/demo.sh)
demo: export DEMO_STARTED_AT := $(shell date +%s)
demo: install
	scripts/demo.sh "$(DATA)" $(RUN_DIR) $(HOST) $(PORT)

# the demo's API key (RUN_DIR/api-key, scripts/demo.sh) unless SEARCH_API_KEY is set
serve: install
	key=$${SEARCH_API_KEY:-$$(cat $(RUN_DIR)/api-key 2>/dev/null || true)}; \
	if [ -n "$$key" ]; then export SEARCH_API_KEY="$$key"; fi; \
	SEARCH_BUNDLES_DIR=$(RUN_DIR)/bundles SEARCH_QUEUE_URL=sqlite:///$(RUN_DIR)/jobs.db \
		$(BIN)/python -m app.serve --host $(HOST) --port $(PORT)

worker: install
	SEARCH_BUNDLES_DIR=$(RUN_DIR)/bundles SEARCH_QUEUE_URL=sqlite:///$(RUN_DIR)/jobs.db \
		SEARCH_DATA_ROOT=$(if $(DATA),$(dir $(DATA)),$(RUN_DIR)/data/) $(BIN)/python -m training worker

# the system packages the tests use (chromium, redis-server, docker-compose) from Debian's archive when root;
# one line names what could not be installed (those tests then skip with the reason). No dataset is needed:
# the suite builds its own (tests/conftest.py).
test-deps:
	@scripts/test_deps.sh

test: install-dev test-deps
	$(BIN)/python -m pytest

# A fresh clone of the committed HEAD (nothing beside it) runs its own `make demo` on a free port, and the page
# in headless Chromium, with the key the demo printed, submits a reindex job, rolls back, activates and writes
# a document (tests/e2e/test_fresh_clone_demo.py). About 14 min on 2 cores (docs/development.md); `make test` deselects it.
demo-check: install-dev test-deps
	$(BIN)/python -m pytest -m fresh_clone tests/e2e

# The image and the compose stack, run for real with docker, or podman installed from the Debian archive
# (scripts/container_test; stdlib Python, needs no venv). Options: CONTAINER_TEST_ARGS="--help".
CONTAINER_TEST_ARGS ?=
container-test:
	$(PY) scripts/container_test $(CONTAINER_TEST_ARGS)

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint Dockerfile docker/redis.Dockerfile docker/milvus.Dockerfile

typecheck: install-dev
	$(BIN)/mypy

# the documentation site (mkdocs.yml): the benchmark plots drawn again from bench/results, then the pages
# built offline into var/site; --strict fails on a broken link or a page missing from the nav
docs: install-dev
	$(BIN)/python scripts/benchmark_plots.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# the load benchmark drives uvicorn with wrk (C, light on the shared cores); it falls back to httpx without it
bench-load: install-dev
	command -v wrk >/dev/null || (apt-get install -y wrk >/dev/null 2>&1 || echo "wrk not installed: using httpx")
	$(BIN)/python -m bench load_bench

clean:
	rm -rf $(VENV) $(RUN_DIR) .pytest_cache .mypy_cache .ruff_cache
