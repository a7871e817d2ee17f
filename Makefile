# The README's two commands are `make reproduce` and `make test`; both set up the venv first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.setup-stamp
PORT    ?= 8888
# make lab's token; empty: a fresh one, drawn once in the recipe (a `?= $(shell ...)` draws one per use, and the
# URL printed and the server's token differed)
TOKEN   ?=
SCALE   ?= cpu
EXECUTOR ?= local
LAB_DIR ?= .
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)   # Jupyter refuses root otherwise (CI runs as root)

.PHONY: setup system-packages test test-e2e test-nb reproduce pipeline lab export format clean-venv slurm-up slurm-down

setup: system-packages $(STAMP)

# Debian packages: bubblewrap (the rollout sandboxes), chromium (the results page checked in a real browser), gcc
# (composer2.kernels.native's decode-attention kernel, built on first use) and the real local Slurm cluster (munge, slurmctld, slurmd,
# slurmdbd, MariaDB). Installed when missing and we are root; otherwise one line says so (the tests that need them
# are then skipped, which CI counts as failing).
system-packages:
	@bash slurm/cluster.sh install
	@{ command -v bwrap >/dev/null && ldconfig -p | grep -q libseccomp.so.2 && command -v chromium >/dev/null && command -v cc >/dev/null; } || { if [ "$$(id -u)" = 0 ]; then echo "installing bubblewrap, libseccomp2, chromium and a C compiler"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap libseccomp2 chromium gcc libc6-dev >/dev/null \
		|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap libseccomp2 chromium gcc libc6-dev >/dev/null; }; \
		else echo "not installing bubblewrap, chromium and gcc (needs root: apt-get install bubblewrap chromium gcc); the sandbox and results-page tests will be skipped, and decoding uses PyTorch's attention"; fi; }

# Idempotent: reruns only when the packaging files change. torch is installed first from its pin
# so that nothing else can pull a CUDA build.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name composer2 --display-name composer2 >/dev/null
	@touch $(STAMP)

# the quick tier (~19 min on 2 cores, the target 10); test-e2e adds the end-to-end tier (pytest -m e2e), as CI (CI=true) always does
test: setup
	$(BIN)/python tests/run_suite.py

test-e2e: setup
	PYTEST_ADDOPTS="--rune2e $$PYTEST_ADDOPTS" $(BIN)/python tests/run_suite.py

# one notebook's tests with make test's flags: make test-nb NB=31_model (or NB=nbs/31_model.ipynb, or NB=31). An
# unknown NB stops make here with one line, before setup (tools/test_nb.py --check needs only the system Python).
ifneq ($(filter test-nb,$(MAKECMDGOALS)),)
NB_ERROR := $(shell $(PY) tools/test_nb.py --check '$(NB)')
ifneq ($(NB_ERROR),)
$(error $(NB_ERROR))
endif
endif
test-nb: setup
	@$(BIN)/python tools/test_nb.py '$(NB)'

# SCALE is required by c2 reproduce (cpu here unless set); ONLY=name,name runs some studies, PLAN=1 prints the plan
reproduce: setup
	$(BIN)/c2 reproduce --scale $(SCALE) --executor $(EXECUTOR) $(if $(ONLY),--only $(ONLY)) $(if $(PLAN),--plan)

# the whole story in order (data -> pretraining -> SFT -> RL -> evaluation), one c2 command per step; EXECUTOR=slurm
# submits each step as a Slurm job that waits for the one before it
pipeline: setup
	SCALE=$(SCALE) EXECUTOR=$(EXECUTOR) ./pipeline.sh

lab: setup
	@token='$(TOKEN)'; token=$${token:-$$($(PY) -c 'import secrets; print(secrets.token_hex(16))')}; \
	echo "JupyterLab: http://127.0.0.1:$(PORT)/lab?token=$$token"; \
	exec $(BIN)/jupyter lab --no-browser --ip 127.0.0.1 --port $(PORT) --ServerApp.token=$$token \
		--ServerApp.root_dir=$(LAB_DIR) --MultiKernelManager.default_kernel_name=composer2 $(ALLOW_ROOT)

# A single-node Slurm cluster on this machine (root): munged, MariaDB, slurmdbd, slurmctld, slurmd; see slurm/README.md
slurm-up:
	@bash slurm/cluster.sh up

slurm-down:
	@bash slurm/cluster.sh down

export: setup
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean

# ruff format (120-character lines, one statement per line) over the notebooks and scripts, then export: make test
# checks both
format: setup
	$(BIN)/ruff format nbs tests kernels tools $(wildcard studies/*.ipynb) && $(MAKE) export

clean-venv:
	rm -rf $(VENV)

# The docs site (tools/docs_site.py) into _docs/: the library reference (nbdev's processed notebooks), the guides of
# nbs/guides/, a page per study from studies/results/; rendered by Quarto when a quarto executable is found, else by
# the script itself. docs-serve builds it, then serves _docs/ on 127.0.0.1:$(DOCS_PORT).
DOCS_PORT ?= 3000
.PHONY: docs docs-serve
docs: setup
	$(BIN)/python tools/docs_site.py

docs-serve: docs
	@echo "docs: http://127.0.0.1:$(DOCS_PORT)/"
	$(BIN)/python -m http.server --bind 127.0.0.1 --directory _docs $(DOCS_PORT)

# One command on a machine with one CUDA GPU (<= 10 minutes): the Triton kernels built for it and bit-exact against
# their references, MXFP8/NVFP4 grouped GEMM and the MoE layer against BF16, gpu-scale pretraining (tokens/s, MFU), MTP
# speculative decoding, one RL step; results in kernels/results/ (kernels/gpu_check.py). Without CUDA, or with DRY=1, a
# dry run that reaches every step and reports the GPU parts as skipped, with the reason.
.PHONY: gpu-check
gpu-check: setup
	$(BIN)/python kernels/gpu_check.py $(if $(DRY),--dry)
