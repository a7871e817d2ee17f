"""Compare packed bases (`pack_base` files) with the shipped composer2/assets/base/cpu-base.pt, on this CPU.

    .venv/bin/python tools/compare_bases.py NEW.pt [MORE.pt ...]

Each file's bf16 weights are loaded into the float32 model (as `adopt_base` does) and measured the way
tools/ship_base.py's `measure` measures a base for its card: the internal-codebase NLL (`codebase_nll` over the first
train.eval_tokens tokens of the checkout's composer2/ code, windows of train.seq_len) and in-context copying
(`copy_nll`: repeat / first), plus the validation loss run_plan logs (code_val, 4 batches of 8 x 256). The card's
column is what ship_base measured on the fp32 final.pt at shipping time (other code then: the internal codebase has
changed since, so compare the files' columns with each other, not with the card's)."""

import json, os, sys, time
from pathlib import Path

import numpy as np, torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from composer2.config import ModelConfig, load_config
from composer2.data.corpus import DataDir
from composer2.model.checkpoint import codebase_nll, copy_nll, read_torch
from composer2.model.moe import MoETransformer

SHIPPED = ROOT / "composer2" / "assets" / "base" / "cpu-base.pt"


def data_dir(key: str) -> DataDir:
    roots = [os.environ.get("C2_DATA"), Path.home() / ".cache" / "composer2", ROOT / ".gpubase" / "data"]
    for r in filter(None, roots):
        if (Path(r) / key / "DONE").is_file():
            return DataDir(Path(r) / key)
    sys.exit(f"compare: no data dir {key} under {', '.join(map(str, filter(None, roots)))}")


def load_packed(path: Path):
    ck = read_torch(path, "packed base")
    model = MoETransformer(ModelConfig(**ck["model_cfg"]))
    model.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in ck["model"].items()})
    return model.eval(), ck


@torch.no_grad()
def val_loss(model, data: DataDir, seq_len: int, batch: int) -> float:
    "run_plan's val/loss: mean over 4 batches of `batch` rows of code_val's first windows (limit_val_batches=4)."
    val = torch.from_numpy(data.tokens("code_val").astype(np.int64))
    n = min(4 * batch, (len(val) - 1) // seq_len)
    x, y = val[: n * seq_len].view(n, -1), val[1 : n * seq_len + 1].view(n, -1)
    losses = [
        torch.nn.functional.cross_entropy(
            model(x[i : i + batch]).logits.float().flatten(0, 1), y[i : i + batch].flatten()
        )
        for i in range(0, n, batch)
    ]
    return float(torch.stack(losses).mean())


def measure(path: Path) -> dict:
    t0 = time.time()
    model, ck = load_packed(path)
    cfg = load_config("cpu-base")
    data = data_dir(ck["data_key"])
    internal = data.internal_tokens()[: cfg.train.eval_tokens]
    c = copy_nll(model, data.vocab_size)
    rec = ck.get("record", {})
    s, p = rec.get("summary", {}), rec.get("provenance", {})
    return dict(
        internal_nll=codebase_nll(model, internal, cfg.train.seq_len)["nll"],
        copy_repeat=c["repeat"],
        copy_first=c["first"],
        val_loss=val_loss(model, data, cfg.train.seq_len, cfg.train.batch_size),
        logged_internal_nll=s.get("internal_nll"),
        logged_val_loss=s.get("val_loss"),
        logged_copy_repeat=(s.get("copy") or {}).get("repeat"),
        steps=s.get("steps"),
        minutes=(s.get("seconds") or 0) / 60,
        data_key=ck["data_key"],
        code_digest=p.get("code_digest"),
        torch=p.get("torch"),
        where=p.get("cpu"),
        eval_s=time.time() - t0,
    )


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    torch.set_num_threads(int(os.environ.get("C2_THREADS", "1")))
    card = json.loads((SHIPPED.with_suffix(".json")).read_text())["measured_at_shipping"]
    cols = {
        "card (fp32, at shipping)": dict(
            internal_nll=card["internal_nll"], copy_repeat=card["copy"]["repeat"], copy_first=card["copy"]["first"]
        )
    }
    for p in [SHIPPED, *map(Path, sys.argv[1:])]:
        name = p.name if p == SHIPPED else f"{p.parent.name}/{p.name}"  # files of the same name from several runs
        cols[f"{name} (bf16, now)" if p != SHIPPED else "shipped cpu-base.pt (bf16, now)"] = measure(p)
    rows = [
        "internal_nll",
        "copy_repeat",
        "copy_first",
        "val_loss",
        "logged_internal_nll",
        "logged_val_loss",
        "logged_copy_repeat",
        "steps",
        "minutes",
        "data_key",
        "code_digest",
        "torch",
        "where",
        "eval_s",
    ]
    w = max(map(len, cols)) + 2
    print(f"{'':22}" + "".join(f"{c:>{w}}" for c in cols))
    for r in rows:
        cells = []
        for v in (cols[c].get(r) for c in cols):
            cells.append("-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)[: w - 2])
        print(f"{r:22}" + "".join(f"{c:>{w}}" for c in cells))
    print(
        f"ln V = {np.log(4096):.3f}; the internal NLL scores the checkout's composer2/ code now (same for every file "
        "column); logged_* are the training's last validation (internal NLL as the code then scored it)"
    )


if __name__ == "__main__":
    main()
