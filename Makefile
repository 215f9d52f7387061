# The two quick-start commands are `make demo` and `make test`; both create the venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hostkit-installed
EXTRAS := notebook,test,openai,anthropic,local,otel,postgres
PIP    := python -m pip install --quiet --disable-pip-version-check
# --compile-bytecode as pip does: sandboxed children (tool discovery, a core's tests) see the
# venv read-only and would otherwise compile every module they import, every time.
UV     := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python

# The notebook extra allows ipykernel>=6.29; CI runs exactly two: this pin in .venv, and
# the oldest supported one below. Both are stated in the README.
PINNED_IPYKERNEL := 7.4.0

# The oldest ipykernel the project claims to support (pyproject: ipykernel>=6.29), in a venv
# of its own, registered as the kernel spec `hostkit-oldest` in a project-local directory.
OLDEST_IPYKERNEL := 6.29.5
OLDEST_VENV      := .venv-kernel-oldest
OLDEST_STAMP     := $(OLDEST_VENV)/.hostkit-installed
KERNELS          := $(CURDIR)/.jupyter-kernels/share/jupyter
OLDEST_SPEC      := $(KERNELS)/kernels/hostkit-oldest/kernel.json
KERNEL_EXTRAS    := notebook,openai,anthropic,local,mcp-servers

NBVAL := --nbval --nbval-sanitize-with notebooks/sanitize.cfg

.PHONY: install bubblewrap postgresql bytecode test test-fast lint typecheck demo bench notebooks kernel-oldest browser-test clean

install: $(STAMP) bubblewrap postgresql

# The sandbox of every process the Host starts for an agent (docs/effects.md, "Sandbox").
# Installed when missing and this is root with apt-get; otherwise one line says what is
# missing (terminal.run then fails closed). Never fails the install: `make test` requires
# the sandbox wherever bwrap is installed, and elsewhere skips its tests and lists them.
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 \
	           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; } \
	      || echo 'bubblewrap: apt-get install failed; terminal.run fails closed and make test skips the sandbox tests until it is installed'; \
	  else \
	    echo 'bubblewrap is missing (install the bubblewrap package as root); terminal.run fails closed and make test skips the sandbox tests'; \
	  fi; }

# The throwaway PostgreSQL the store matrix runs on (tests/postgres.py: initdb and pg_ctl
# on loopback, never a system service). Installed when no server binaries are found and this
# is root with apt-get; otherwise one line says what is missing. Never fails the install:
# `make test` requires the postgres leg of the store matrix wherever the server binaries
# are found, and elsewhere skips it and lists what it skipped.
postgresql:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null 2>&1 \
	           && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1; }; } \
	      || echo 'postgresql: apt-get install failed; make test skips the PostgreSQL store tests until it is installed'; \
	  else \
	    echo 'PostgreSQL is missing (install the postgresql package as root); make test skips the PostgreSQL store tests'; \
	  fi; }

# Reinstall only when the dependency declaration (or a pin here) or the version changes; the
# package itself is editable, but its metadata (importlib.metadata.version) is written at install.
# uv installs (pip's resolver semantics, parallel downloads, a shared cache the packaging
# check's fresh environments reuse): pip only bootstraps it.
$(STAMP): pyproject.toml Makefile hostkit/_version.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/$(PIP) 'uv>=0.5'
	$(UV) -e '.[$(EXTRAS)]' 'ipykernel==$(PINNED_IPYKERNEL)'
	$(BIN)/hostkit model pull
	@touch $(STAMP)

kernel-oldest: $(OLDEST_SPEC)

# hostkit itself (editable, this checkout) with the extras a notebook kernel uses (the local
# model speaks through the openai adapter), the oldest ipykernel, the MCP server 08-mcp
# starts, and the model file the notebooks' local-model cells serve (its own hostkit fetches
# it into the per-user cache the dev venv shares; nothing is fetched when it is there).
$(OLDEST_STAMP): pyproject.toml Makefile hostkit/_version.py $(STAMP)
	@test -x $(OLDEST_VENV)/bin/python || $(PYTHON) -m venv $(OLDEST_VENV)
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(OLDEST_VENV)/bin/python \
	    'ipykernel==$(OLDEST_IPYKERNEL)' -e '.[$(KERNEL_EXTRAS)]'
	$(OLDEST_VENV)/bin/hostkit model pull
	@touch $(OLDEST_STAMP)

$(OLDEST_SPEC): $(OLDEST_STAMP)
	$(OLDEST_VENV)/bin/python -m ipykernel install --prefix '$(CURDIR)/.jupyter-kernels' \
	    --name hostkit-oldest --display-name 'hostkit (ipykernel $(OLDEST_IPYKERNEL))' \
	    >/dev/null 2>&1 || (echo 'ipykernel install failed' >&2; exit 1)
	@touch $(OLDEST_SPEC)

lint: install
	$(BIN)/ruff check hostkit tests bench
	$(BIN)/ruff format --check hostkit tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

typecheck: install
	$(BIN)/mypy

# Every test spawns processes that import hostkit (the CLI, serve, workers, kernels). Where
# PYTHONDONTWRITEBYTECODE is set, each of them would compile hostkit from source again
# (about 0.8 s a process); compiled once here, they all read the cached bytecode.
# pytest rewrites the asserts of each test module it imports (29 s of CPU for the suite, of
# a worker's 33 s collection) and, where PYTHONDONTWRITEBYTECODE is set, keeps none of it,
# so each test worker did it all again. Collected here once (two halves on two cores, with
# bytecode written), the workers read the rewritten modules, which pytest checks against
# their sources, and collect in 11 s. A collection error is reported by the run itself.
bytecode: install
	@$(BIN)/python -m compileall -q hostkit >/dev/null
	@collect='env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest --collect-only -q -p no:cacheprovider'; \
	$$collect tests/contract >/dev/null 2>&1 & half=$$!; \
	$$collect --ignore=tests/contract --ignore=tests/browser tests >/dev/null 2>&1; \
	wait $$half; true

# The inner loop: the tests not marked slow, on every core (no notebooks, no kernels).
test-fast: install bytecode
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto -m 'not slow' --ignore=tests/browser \
	    --ignore=tests/kernel tests

# The tests (tests/kernel drives both kernels itself), then the notebooks on the pinned
# kernel and again on the oldest supported ipykernel. tests/browser is opt-in (browser-test).
# Four test workers on two cores: most tests wait on the processes they start (hundreds of
# CLI and serve processes a run), on fsync and on timeouts they provoke, so with fewer the
# cores idle (two workers: a third of their time; three: 731 s where four took 617 s). A
# test's `hostkit` command is forked from a warm one per worker (tests/cli.py), which
# saves each the import of the CLI.
# Tests one at a time with work stealing (a few long files no longer leave a worker idle at
# the end); notebooks on two workers, one file each (a notebook's cells share one kernel, in
# order). The type checker is single-threaded, so it runs beside them. CI stays under 15
# minutes on 2 cores.
# HOSTKIT_REQUIRE (tests/parts.py): a system part named there fails its tests when missing
# instead of skipping them. `installed` names each part a target above installed or found:
# PostgreSQL's server binaries, bwrap, the local extra (whose GGUF $(STAMP) pulled); the
# oldest kernel is always built first. A part no target could install here (not root, no
# apt-get) skips its tests, and the run ends with a section listing each such part, how
# many tests it skipped and how to install it.
test: $(OLDEST_SPEC) bytecode
	$(BIN)/ruff check hostkit tests bench
	$(BIN)/ruff format --check hostkit tests bench
	$(BIN)/lint-imports
	@$(BIN)/mypy > .mypy-report 2>&1 & typing=$$!; \
	HOSTKIT_REQUIRE=oldest-kernel,installed $(BIN)/python -m pytest -n 4 --dist worksteal --durations=25 \
	    --ignore=tests/browser tests; tests=$$?; \
	wait $$typing; typed=$$?; echo '$(BIN)/mypy'; cat .mypy-report; rm -f .mypy-report; \
	test $$tests = 0 && test $$typed = 0
	$(BIN)/python -m pytest $(NBVAL) -n 2 --dist loadfile notebooks
	JUPYTER_PATH='$(KERNELS)' $(BIN)/python -m pytest -p no:cacheprovider $(NBVAL) -n 2 \
	    --dist loadfile --nbval-kernel-name hostkit-oldest notebooks

# Opt-in: JupyterLab on loopback, Debian's chromium driven by Playwright, a real click on
# 02-approvals' Approve button; prints the click-to-resume latency (.hostkit-browser/). Then
# Stop, the truncated badge and the budget chart, and screenshots of the panels and inspectors
# in light and dark themes (.hostkit-browser/screenshots/).
browser-test: install
	@test -x /usr/bin/chromium || (apt-get update && apt-get install -y chromium)
	$(BIN)/$(PIP) -e '.[browser]'
	HOSTKIT_BROWSER_TEST=1 $(BIN)/python -m pytest -p no:cacheprovider -s tests/browser

# A scripted multi-step turn with an authored tool, then a real model (local, or OPENAI_BASE_URL).
# The demo runs on embedded SQLite: it does not wait for PostgreSQL (only the tests need it).
demo: $(STAMP) bubblewrap
	$(BIN)/hostkit demo

# Re-execute the notebooks in place after changing what they show (outputs are the spec).
notebooks: install
	cd notebooks && for nb in *.ipynb; do ../$(BIN)/jupyter execute --inplace "$$nb" || exit 1; done

bench: install
	$(BIN)/$(PIP) -e '.[bench]'
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/turn_bench.py
	$(BIN)/python bench/effects_bench.py
	$(BIN)/python bench/mcp_bench.py
	$(BIN)/python bench/context_bench.py
	$(BIN)/python bench/inbox_bench.py
	$(BIN)/python bench/serve_bench.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) .jupyter-kernels .hostkit-browser .pytest_cache .ruff_cache .hypothesis
