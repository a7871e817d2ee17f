"""Ship composer2's pretrained base (issue 49): pack a trained `cpu-base` base stage into composer2/assets/base/ with
its card (what it is, how it was trained, its curves) and a figure of the curves.

    c2 pretrain --scale cpu-base --stage base      # ~1 h on 2 cores, resumable
    python tools/ship_base.py                      # then commit composer2/assets/base/

A maintainer's step, run once per retraining; scales adopt the file through `pretrain.base_from`."""

import argparse, json, sys
from pathlib import Path
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from composer2.config import load_config
from composer2.data.corpus import open_data
from composer2.model.checkpoint import codebase_nll, copy_nll, load_checkpoint
from composer2.pretrain.stages import pack_base

ROOT = Path(__file__).resolve().parents[1]


def figure(rec, path):
    "Training loss, and the validation's copy NLL (repeat) and internal-codebase NLL, against the step."
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.0, 3.0), dpi=110)
    s, l = zip(*rec["loss_curve"])
    a.plot(s, l, color="0.3")
    a.set(xlabel="step", ylabel="training loss (nats/token)", title="loss (copy rows' repeats, then the mix)")
    v = rec["val_curve"]
    b.plot([r["step"] for r in v], [r["val/copy_repeat"] for r in v], "o-", label="copy_nll: the repeat")
    b.plot([r["step"] for r in v], [r["val/copy_first"] for r in v], "s--", label="copy_nll: the first time")
    b.plot(
        [r["step"] for r in v],
        [r["val/internal_nll"] for r in v],
        "^-",
        label="internal NLL as logged\n(on nbdev's _modidx.py:\nsee the card)",
    )
    b.axhline(1.0, color="0.6", lw=0.8, ls=":")
    b.set(xlabel="step", ylabel="NLL (nats/token)", title="validation")
    b.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    for ax in (a, b):
        ax.title.set_fontsize(9)
    fig.tight_layout()
    fig.savefig(path)


def measure(stage, scale):
    "The final checkpoint's internal-codebase NLL and copy NLL with the library's measures now (the shipping code)."
    cfg = load_config(scale)
    data = open_data(cfg)
    model, _ = load_checkpoint(Path(stage) / "final.pt")
    internal = data.internal_tokens()[: cfg.train.eval_tokens]
    return dict(
        internal_nll=codebase_nll(model, internal, cfg.train.seq_len)["nll"], copy=copy_nll(model, data.vocab_size)
    )


def card(rec, name, warm, now, against):
    s, p = rec["summary"], rec["provenance"]
    v = rec["val_curve"]
    against_nll = f" (the base the RL studies trained before it: {against['internal_nll']:.3f})" if against else ""
    against_copy = f" (before: repeat {against['copy']['repeat']:.3f})" if against else ""
    against_copy += f"; ln V = {now['copy']['uniform']:.2f}"
    rows = "\n".join(
        f"| {r['step']} | {r['val/copy_repeat']:.3f} | {r['val/copy_first']:.3f} | {r['val/internal_nll']:.3f} |"
        for r in v
    )
    return f"""# composer2's pretrained base: `{name}.pt`

The model every cpu-scale RL study starts from, the way the report starts from a pretrained model (it continues
pretraining Kimi K2.5): the cpu shape ({s["params"]["total"]:,} parameters, {s["params"]["active"]:,} active), trained
once with `c2 pretrain --scale {name} --stage base` and packed by `tools/ship_base.py` (bf16 weights, their config, the
data key of the corpus and tokenizer it was trained on, and this record). A scale adopts it with
`pretrain.base_from` (`composer2.pretrain.stages.adopt_base`); a machine whose corpus differs (another Python's
standard library, other package versions: another data key) trains its own with the same command.

| | |
|---|---|
| file | `composer2/assets/base/{name}.pt`, {rec["bytes"]:,} bytes, sha256 `{rec["sha256"]}` |
| trained at | commit `{p["commit"]}` (dirty: {p["dirty"]}), code digest `{p["code_digest"]}`, torch {p["torch"]} |
| trained on | {p["cpu"]} ({", ".join(p.get("cpu_flags", []))}), {s["seconds"] / 60:.0f} min |
| steps, tokens | {s["steps"]:,} steps, {s["tokens"]:,} tokens (the first {warm:,} steps copy rows only) |
| internal-codebase NLL, measured at shipping | {now["internal_nll"]:.3f} nats/token{against_nll} |
| copying (`copy_nll`), likewise | repeat {now["copy"]["repeat"]:.3f}, first {now["copy"]["first"]:.3f}{against_copy} |

**The recipe** (issue 49's search, in `nbs/70_pretrain.ipynb`): the unembedding tied to the embedding, AdamW at 1e-3
(100 warm-up steps, cosine to 1e-4), batches of 8 x 256 tokens; the first {warm:,} steps on copy rows only, 32 rows of
64 tokens each (random ids, a span of 8-23, a gap, the span again; loss on the repeat); then half the rows copy rows
of 256 tokens (spans of 16-63) and half pretraining windows (90% code, 10% prose).

![curves]({name}.png)

The curves as logged during training. Its internal NLL column is the metric of the training's code: at commits before
ffa6813 its first 16,384 tokens were nbdev's generated `_modidx.py` (a repeated dict pattern a copying model predicts
well), not the codebase; the table above measures both checkpoints on real code.

| step | copy_nll repeat | copy_nll first | internal NLL (as logged) |
|---|---|---|---|
{rows}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", default="runs/pretrain/cpu-base/base", help="the trained base stage")
    ap.add_argument("--name", default="cpu-base")
    ap.add_argument("--against", help="a base stage to compare with (the one the RL studies trained before)")
    a = ap.parse_args()
    stage = ROOT / a.stage
    if not (stage / "done.json").is_file():
        sys.exit(f"ship_base: {stage} has no done.json: train it first (c2 pretrain --scale {a.name} --stage base)")
    out = ROOT / "composer2" / "assets" / "base"
    rec = pack_base(stage, out / f"{a.name}.pt")
    figure(rec, out / f"{a.name}.png")
    warm = int(next(l.split(":")[1] for l in rec["config"].splitlines() if "copy_warmup_steps" in l))
    now = measure(stage, a.name)
    against = measure(ROOT / a.against, a.name) if a.against else None
    rec.update(measured_at_shipping=now, against=against and {"stage": a.against, **against})
    (out / f"{a.name}.json").write_text(json.dumps({k: v for k, v in rec.items() if k != "config"}, indent=1) + "\n")
    (out / f"{a.name}.md").write_text(card(rec, a.name, warm, now, against))
    print(f"{out / a.name}.pt: {rec['bytes']:,} bytes, sha256 {rec['sha256'][:16]}; card {a.name}.md")


if __name__ == "__main__":
    main()
