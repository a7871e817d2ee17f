#!/bin/bash
# Train composer2's cpu-base base stage on the device's GPU (no network): wheels from .whl/, data from .gpubase/data,
# runs under /tmp, results (packed base, done/provenance/summary json, metrics.csv, losses.jsonl, log) into $OUT.
# Prepared here (ignored folders, carried to the device): the wheels the device lacks (omegaconf, tqdm, tokenizers,
# at .venv's versions: `pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl NAME==VERSION`)
# and the built data dir: `mkdir -p .gpubase/data && cp -r ~/.cache/composer2/e529de289e5d4710 .gpubase/data/`
# (corpus.jsonl and prose.jsonl may be left out: only the SFT stage reads them). Then one device call:
# `bash tools/base_gpu.sh` with carry [".whl", ".gpubase"]; `python tools/compare_bases.py FILE` here measures what
# comes back next to the shipped base.
# Usage, from the repository root: bash tools/base_gpu.sh [key=value ...]   (env: PY, C2_DEVICE, C2_MAX_MINUTES)
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/c2gpu-out}; mkdir -p "$OUT"; export OUT
PY=${PY:-python3}
SITE=${C2_SITE:-/tmp/site}
echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl || exit 3
export PYTHONPATH=$SITE:$PWD C2_DATA=$PWD/.gpubase/data PYTHONUNBUFFERED=1
export C2_RUNS=${C2_RUNS:-/tmp/c2runs} C2_DEVICE=${C2_DEVICE:-cuda}
$PY tools/base_gpu.py "$@" 2>&1 | tee "$OUT/log.txt"
rc=${PIPESTATUS[0]}
echo "wall $(( $(date +%s) - T0 )) s (whole command), rc $rc" | tee -a "$OUT/log.txt"
ls -la "$OUT"
exit "$rc"
