# `make demo` and `make test` set up .venv themselves (README, Quick start).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.test-extras-stamp
CORES  ?= all

.PHONY: setup demo test test-fast bench clean

setup: $(STAMP)

# torch==2.13.0 first: on these machines it resolves to a local CPU wheel; letting a dependency pull
# torch unpinned would fetch a multi-GB CUDA build.
# uv installs the same pinned versions as pip, many times faster (docs/performance.md). It does not read
# pip's configuration, so pip's indexes, find-links and constraints are handed to it; pip itself is the
# fallback if uv cannot install. COMPILE: uv, unlike pip, leaves the .pyc files out, so with
# PYTHONDONTWRITEBYTECODE set (as on CI machines) every job compiled torch, transformers and mlflow from
# source again, several times its own CPU. Compiling all of site-packages (uv's UV_COMPILE_BYTECODE) was
# most of the set-up's time; test suites and transformers' model folders other than the auto classes and Qwen2
# (the tiny world's and the paper's models) are left out, since no job imports them. A module left out
# still imports, compiled in memory. compileall skips files whose .pyc is up to date, and its exit status
# is not checked: a file written for a newer Python (torch ships py312_intrinsics.py) fails to compile
# here as it would fail to import.
PIP_SETTING = $$($(BIN)/python -m pip config get global.$(1) 2>/dev/null)
NOT_IMPORTED = /tests/|/transformers/models/(?!auto/|qwen2/)
COMPILE = $(BIN)/python -m compileall -q -j0 -x '$(NOT_IMPORTED)' \
          "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
UV = UV_INDEX_STRATEGY=unsafe-best-match UV_INDEX_URL="$(call PIP_SETTING,index-url)" \
     UV_EXTRA_INDEX_URL="$(call PIP_SETTING,extra-index-url)" UV_FIND_LINKS="$${PIP_FIND_LINKS:-$(call PIP_SETTING,find-links)}" \
     UV_CONSTRAINT="$(call PIP_SETTING,constraint)" $(BIN)/uv pip install --quiet --python $(BIN)/python
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(UV) torch==2.13.0 -e '.[train,eval,workflow,dev]' || { $(BIN)/python -m pip install --quiet torch==2.13.0 \
	  && $(BIN)/python -m pip install --quiet -e '.[train,eval,workflow,dev]'; }
	$(COMPILE)
	touch $@

# lighteval only for the test that cross-checks our math verifier against lighteval's own metric.
$(TEST_STAMP): $(STAMP)
	$(UV) -e '.[train,eval,workflow,dev,lighteval]' || $(BIN)/python -m pip install --quiet -e '.[train,eval,workflow,dev,lighteval]'
	$(COMPILE)
	touch $@

# Workflow rules call `python -m balagg`, so the venv goes first on PATH. The workflow profile
# (profiles/default/config.yaml) applies here as to any snakemake call: run: rules in Snakemake's process,
# and its console (the balagg logger: progress and problems, the full log in .snakemake/log/).
# `balagg jobserver` imports torch, transformers, TRL and MLflow once and forks each `python -m balagg`
# job from it instead of letting every job import them again (docs/jobserver.md).
demo: $(STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null  # every job imports src/: compile it once, not per job
	@echo "snakemake --cores $(CORES): the default campaign (tiny world) into results/default/"
	@PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m balagg jobserver --log results/default/logs/jobserver.log -- $(BIN)/snakemake --cores $(CORES)
	@$(BIN)/python -m balagg results --campaign-dir results/default

# The suite runs on TEST_WORKERS processes (pytest-xdist), one test module per worker at a time
# (--dist loadfile), so a module's fixtures (a pipeline run, a trained cell) are built once. Most tests
# keep one core busy, so two workers use both cores of a 2-core machine.
TEST_WORKERS ?= 2
PYTEST = PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test: $(TEST_STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null
	$(PYTEST)

# The inner loop's lane: every test but the slow ones (Snakemake, the pipeline, training end to end, the
# benches' quick runs, heavy processes: tests/conftest.py says which). `make test` (CI) runs them all.
test-fast: $(TEST_STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null
	$(PYTEST) -m "not slow"

bench: $(STAMP)
	$(BIN)/python bench/aggregation.py

clean:
	rm -rf $(VENV) .snakemake results
