# The two commands of the README: `make demo` and `make test`. Each creates .venv itself.
# python3.12 comes from pyenv here (.python-version says 3.12); set PYTHON to use another.
PYTHON ?= python3.12
VENV := .venv
BIN := $(VENV)/bin
ADAPTERS := $(sort $(dir $(wildcard adapters/*/pyproject.toml)))
STAMP := $(VENV)/.installed

.PHONY: test demo deploy-demo lint typecheck bench clean

$(STAMP): pyproject.toml $(wildcard adapters/*/pyproject.toml)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found (Python >= 3.12 is needed); set PYTHON=..." >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[redis,test]' $(foreach a,$(ADAPTERS),-e '$(a)[test]')
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check src adapters tests bench examples
	$(BIN)/ruff format --check src adapters

typecheck: $(STAMP)
	$(BIN)/mypy src $(foreach a,$(ADAPTERS),$(a)src)

test: lint typecheck
	$(BIN)/python -m pytest

demo: $(STAMP)
	$(BIN)/python examples/parcel_tracker.py

deploy-demo: $(STAMP)
	$(BIN)/python examples/deploy/run.py

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
