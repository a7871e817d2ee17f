#!/usr/bin/env bash
# The whole story in order, one `c2` command per step: data -> pretraining stages -> SFT -> RL -> held-out evaluation.
#
#   ./pipeline.sh                      # cpu scale, here (make pipeline)
#   SCALE=smoke ./pipeline.sh          # seconds per step: what the tests run
#   EXECUTOR=slurm ./pipeline.sh       # each step a Slurm job that starts when the one before it succeeded
#
# SCALE: smoke, cpu or gpu (default cpu). RUNS: where the stages and the RL run write (default runs/pipeline/SCALE).
# Every step resumes a killed run and skips a finished one, so rerunning the script continues where it stopped.
# Extra key=value overrides for every step: ./pipeline.sh rl.steps=8
set -euo pipefail
cd "$(dirname "$0")"
SCALE=${SCALE:-cpu}
EXECUTOR=${EXECUTOR:-local}
RUNS=${RUNS:-runs/pipeline/$SCALE}
C2=${C2:-$PWD/.venv/bin/c2}
# the local cluster's config when none is set (`make slurm-up`), found as c2 finds it
conf=${C2_SLURM_DIR:-/var/tmp/c2-slurm}/etc/slurm.conf
if [ -z "${SLURM_CONF:-}" ] && [ -f "$conf" ]; then export SLURM_CONF=$conf; fi
cfg=(--scale "$SCALE" "pretrain.runs=$RUNS/pretrain" "rl.runs=$RUNS/rl" pretrain.mtp_from=small "$@")
mkdir -p "$RUNS"
prev=""

step() {   # step NAME c2-arguments...: run it here, or submit it to Slurm after the previous step
  local name=$1; shift
  if [ "$EXECUTOR" = slurm ]; then
    prev=$(sbatch --parsable --job-name "c2-$name" --output "$RUNS/slurm-%j-$name.out" ${prev:+--dependency=afterok:$prev} \
                  --kill-on-invalid-dep=yes --wrap "cd $(printf %q "$PWD") && $(printf '%q ' "$C2" "$@")")
    echo "$name: Slurm job $prev"
  elif [ "$EXECUTOR" = local ]; then
    echo "== $(date +%H:%M:%S) $name: c2 $*"
    "$C2" "$@"
  else echo "pipeline.sh: EXECUTOR=$EXECUTOR: choose local or slurm" >&2; exit 2
  fi
}

step data     data build "${cfg[@]}"
step base     pretrain --stage base "${cfg[@]}"                # cpu: adopts the shipped base; smoke, gpu: from scratch
step cpt      pretrain --stage cpt --level small "${cfg[@]}"   # continued pretraining (its mid checkpoint gets MTP)
step mtp      pretrain --stage mtp "${cfg[@]}"                 # MTP modules by self-distillation
step long     pretrain --stage long "${cfg[@]}"                # long-context extension
step sft      pretrain --stage sft "${cfg[@]}"                 # SFT on oracle agent transcripts
step rl       rl rl.init=sft "${cfg[@]}"                        # async RL in the sandboxed harness
step eval     tasks eval --policy "$RUNS/rl/$SCALE/async/final.pt" --against "$RUNS/pretrain/$SCALE/sft/final.pt" \
              -k 4 --out "$RUNS/eval.json" "${cfg[@]}"         # held-out pass@1 / best-of-K: RL against SFT
[ "$EXECUTOR" = slurm ] && echo "follow with: squeue; the last job ($prev) writes $RUNS/eval.json"
exit 0
