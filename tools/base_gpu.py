"""Train composer2's pretrained base (`cpu-base` scale, base stage) on a CUDA machine from the shipped data dir.

The recipe is nbs/scales/cpu-base.yaml unchanged but train.device (and train.dtype=float32 spelled out: Lightning's
32-true, as on the CPU). It does what `c2 pretrain --scale cpu-base --stage base` does (`run_stage` -> `run_plan`),
except that the data dir is opened by its key (e529de289e5d4710, the corpus built here from Python 3.11.7's stdlib)
instead of by recomputing the manifest from this machine's stdlib and packages (which would give another key), and
that a wall-clock guard (`C2_MAX_MINUTES`, default 4.5; 0 = none) stops training if the GPU is far slower than
expected (then done.json says stopped_early). Then it packs final.pt like tools/ship_base.py (`pack_base`: bf16
weights + record) into $OUT and copies done.json, provenance.json, metrics.csv, losses.jsonl and a summary.json.

Environment: OUT (results), C2_DATA (holds <key>/), C2_RUNS (default /tmp/c2runs), C2_DEVICE (default cuda).
Arguments: further key=value overrides (for a local smoke test only, e.g. pretrain.base_steps=20)."""

import hashlib, json, os, platform, shutil, subprocess, sys, time
from pathlib import Path

T0 = time.time()
import torch, torch.nn.functional as F

KEY = "e529de289e5d4710"
OUT = Path(os.environ.get("OUT") or "/tmp/c2gpu-out")
RUNS = os.environ.get("C2_RUNS", "/tmp/c2runs")
DEVICE = os.environ.get("C2_DEVICE", "cuda")
MINUTES = float(os.environ.get("C2_MAX_MINUTES", "4.5"))
OUT.mkdir(parents=True, exist_ok=True)
note = {
    "argv": sys.argv[1:],
    "python": platform.python_version(),
    "torch": torch.__version__,
    "float32_matmul_precision": torch.get_float32_matmul_precision(),
}  # "highest": no TF32, as on the CPU


def say(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def preflight() -> str:
    """The expert backend to use: grouped_mm if F.grouped_mm does fp32 forward + backward on this GPU and matches
    the per-expert loop, else loop (the same float32 products, one matmul per expert; not part of the base's arch)."""
    if not hasattr(F, "grouped_mm") and hasattr(torch, "_grouped_mm"):  # older torch: the private name
        F.grouped_mm = lambda a, b, offs=None, **k: torch._grouped_mm(a, b, offs=offs, **k)
        note["grouped_mm"] = "aliased torch._grouped_mm"
    from composer2.kernels.registry import loop_grouped_mm, torch_grouped_mm

    g = torch.Generator().manual_seed(0)
    counts = torch.tensor([0, 5, 17, 1, 0, 30, 8, 3, 12, 0, 9, 2, 40, 7, 1, 6])
    offs = counts.cumsum(0).to(torch.int32).to(DEVICE)
    a0, b0 = torch.randn(int(counts.sum()), 192, generator=g), torch.randn(16, 192, 256, generator=g) * 0.05
    res = []
    for fn in (torch_grouped_mm, loop_grouped_mm):
        a, b = a0.to(DEVICE).requires_grad_(), b0.to(DEVICE).requires_grad_()
        y = fn(a, b, offs)
        (y.square().sum()).backward()
        res.append((y.detach(), a.grad, b.grad))
    rel = max(float((p - q).abs().max() / q.abs().max().clamp_min(1e-12)) for p, q in zip(*res))
    note["grouped_mm_fp32_rel_err_vs_loop"] = rel
    return "grouped_mm" if rel < 1e-4 else "loop"


if DEVICE == "cuda":
    if not torch.cuda.is_available():
        sys.exit("base_gpu: CUDA is not available")
    note["gpu"] = torch.cuda.get_device_name(0)
try:
    backend = preflight()
except Exception as e:  # no fp32 grouped GEMM on this build: the loop backend computes the same products
    note["grouped_mm_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    backend = "loop"
say(f"device {note.get('gpu', DEVICE)}; expert backend {backend}", {k: v for k, v in note.items() if "grouped" in k})

from composer2.config import load_config
from composer2.data.corpus import DataDir
from composer2.model.checkpoint import codebase_nll, copy_nll, load_checkpoint
from composer2.pretrain.stages import pack_base, run_plan, stage_plan
from composer2.runs import stage_dir

overrides = [f"train.device={DEVICE}", "train.dtype=float32", f"pretrain.runs={RUNS}"]
overrides += [f"model.expert_backend={backend}"] if backend != "grouped_mm" else []
overrides += sys.argv[1:]
cfg = load_config("cpu-base", None, overrides)
data = DataDir(Path(os.environ["C2_DATA"]) / KEY, scale="cpu-base")
assert data.manifest["key"] == KEY and data.vocab_size == cfg.data.vocab_size, (data.manifest["key"], data.vocab_size)
plan = stage_plan(cfg, "base")
sd = stage_dir(cfg, plan.name)
note.update(overrides=overrides, stage_dir=str(sd), plan=dict(steps=plan.steps, copy_warmup=plan.copy_warmup))
say(
    f"stage base: {plan.steps} steps ({plan.copy_warmup} copy warm-up), batch {plan.batch_size}x{plan.seq_len}, "
    f"into {sd}; guard {MINUTES} min"
)
t1 = time.time()
done = run_plan(cfg, plan, sd, data, progress=False, minutes=MINUTES)
note["train_wall_s"] = time.time() - t1
sec = done.get("seconds") or 1
say(
    f"trained: {done['steps']} steps in {sec:.1f} s ({1000 * sec / max(1, done['steps'] - done['resumed_from']):.1f} "
    f"ms/step incl. evals), stopped_early={done['stopped_early']}, internal NLL {done['internal_nll']:.3f}, "
    f"copy {done['copy']}"
)

dest = OUT / "cpu-base-gpu.pt"
rec = pack_base(sd, dest)
model, _ = load_checkpoint(sd / "final.pt")  # as tools/ship_base.py measures (fp32 final.pt, on the CPU)
internal = data.internal_tokens()[: cfg.train.eval_tokens]
measured = dict(
    internal_nll=codebase_nll(model, internal, cfg.train.seq_len)["nll"], copy=copy_nll(model, data.vocab_size)
)
say(f"packed {dest.name}: {rec['bytes']:,} bytes, sha256 {rec['sha256'][:16]}; measured (fp32, CPU) {measured}")
for src, name in [("done.json", "done.json"), ("provenance.json", "provenance.json"), ("losses.jsonl", "losses.jsonl")]:
    shutil.copy(sd / src, OUT / name)
csvs = sorted(sd.glob("logs/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[1]))
if csvs:
    shutil.copy(csvs[-1], OUT / "metrics.csv")
note.update(
    done=done,
    measured_fp32=measured,
    packed=dict(bytes=rec["bytes"], sha256=rec["sha256"]),
    total_wall_s=time.time() - T0,
    lightning=__import__("lightning").__version__,
    tokenizers=__import__("tokenizers").__version__,
)
(OUT / "summary.json").write_text(json.dumps(note, indent=1, default=str) + "\n")
say(f"done; python wall {note['total_wall_s']:.1f} s; files: {sorted(p.name for p in OUT.iterdir())}")
