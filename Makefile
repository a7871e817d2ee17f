# The README's two commands are `make reproduce` and `make test`; both set up the venv first.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.setup-stamp
PORT    ?= 8888
TOKEN   ?= $(shell $(PY) -c 'import secrets; print(secrets.token_hex(16))')
SCALE   ?= cpu

.PHONY: setup test reproduce lab export clean-venv

setup: $(STAMP)

# Idempotent: reruns only when the packaging files change. torch is installed first from its pin
# so that nothing else can pull a CUDA build.
$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt torch==2.13.0
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name composer2 --display-name composer2 >/dev/null
	@touch $(STAMP)

test: setup
	$(BIN)/python tests/run_suite.py

reproduce: setup
	$(BIN)/c2 reproduce --scale $(SCALE)

lab: setup
	@echo "JupyterLab: http://127.0.0.1:$(PORT)/lab?token=$(TOKEN)"
	$(BIN)/jupyter lab --no-browser --ip 127.0.0.1 --port $(PORT) --ServerApp.token=$(TOKEN) \
		--MultiKernelManager.default_kernel_name=composer2

export: setup
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean

clean-venv:
	rm -rf $(VENV)
