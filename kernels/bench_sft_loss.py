"""An SFT step with the vocabulary heads on every position against the heads only where the loss counts.

    python kernels/bench_sft_loss.py [--steps 8] [--repeats 3]

SFT's loss covers the assistant's turns, about a quarter of a row's positions; at cpu scale the vocabulary head (4096
x 192), run twice with the MTP module, is the largest matmul of a step. `training_loss` now runs the heads only where
the mask is not 0 (`logits_at`). This times one whole SFT training step (forward, backward, AdamW) at the shapes of the
two studies whose SFT stages dominate `make reproduce` (best_of_k: 2 x 768 tokens; self_summary: 2 x 1024), on the
same batches from each study's own SFT stream and the same initial weights, two ways in alternating processes:
`dense` (composer2 at OLD_REV, the heads on every position, the mask applied after) and `masked` (this checkout).
Written to kernels/results/sft_loss_<device>.json: per study, the share of positions the loss counts, each arm's
median step seconds, `speedup` (dense / masked) and the largest difference between the two arms' losses.
"""

import argparse, json, os, subprocess, sys, tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

OLD_REV = "a37adb0"  # main before the masked heads
STUDIES = ("best_of_k", "self_summary")


def batches(study: str, steps: int, path: Path) -> float:
    "The first `steps` + 2 batches of `study`'s cpu SFT stream, saved to `path`; returns the share of positions counted."
    import torch
    from composer2.config import load_config
    from composer2.data.corpus import open_data
    from composer2.pretrain.stages import TranscriptStream, sft_examples, stage_plan
    from composer2.studies.registry import resolve_params

    cfg = load_config("cpu", overrides=resolve_params(study, "cpu")["config"])
    data, plan = open_data(cfg), stage_plan(cfg, "sft")
    s = TranscriptStream(
        sft_examples(data, cfg=cfg),
        plan.batch_size,
        plan.seq_len,
        cfg.train.seed,
        code=data.tokens("code_train"),
        mix=cfg.pretrain.sft_pretrain_mix,
    )
    bs = [s.batch_at(i) for i in range(steps + 2)]  # two warm-up steps
    torch.save(dict(batches=bs, config=resolve_params(study, "cpu")["config"], vocab=data.vocab_size), path)
    return float(sum((m != 0).sum() for _, _, m in bs) / sum(m.numel() for _, _, m in bs))


def arm(path: str):
    "Time SFT steps on the saved batches with the importable composer2; print one JSON line."
    import time, torch
    from composer2.config import load_config
    from composer2.model.moe import training_loss
    from composer2.model.checkpoint import build_model

    b = torch.load(path, weights_only=False)
    torch.manual_seed(0)
    model = build_model(load_config("cpu", overrides=b["config"]), b["vocab"]).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
    secs, losses = [], []
    for i, (x, y, m) in enumerate(b["batches"]):
        t = time.perf_counter()
        loss = training_loss(model, x, y, m)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= 2:
            secs.append(time.perf_counter() - t)
        losses.append(float(loss))
    print(json.dumps(dict(secs=secs, losses=losses)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="timed steps per process (after two warm-up steps)")
    ap.add_argument("--repeats", type=int, default=3, help="processes per arm and study, alternated")
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.arm:
        return arm(a.arm)  # composer2 from PYTHONPATH: this checkout or OLD_REV's
    sys.path.insert(0, str(ROOT))
    import numpy as np, torch
    from bench_rollout import device_name, old_checkout, write_result

    work = Path(tempfile.mkdtemp(prefix="bench_sft_loss-"))
    old = old_checkout(work / "old", OLD_REV)
    res = dict(
        device=device_name(),
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        old_rev=OLD_REV,
        steps=a.steps,
        repeats=a.repeats,
        studies={},
    )
    for study in STUDIES:
        path = work / f"{study}.pt"
        share = batches(study, a.steps, path)
        runs = {"dense": [], "masked": []}
        for _ in range(a.repeats):
            for name, src in (("dense", old), ("masked", ROOT)):
                env = {**os.environ, "PYTHONPATH": str(src), "C2_SCALES": str(ROOT / "nbs" / "scales")}
                p = subprocess.run(
                    [sys.executable, __file__, "--arm", str(path)], env=env, capture_output=True, text=True
                )
                if p.returncode:
                    raise SystemExit(f"bench_sft_loss: the {name} arm failed:\n{p.stderr[-2000:]}")
                runs[name].append(json.loads(p.stdout.strip().splitlines()[-1]))
        med = {k: float(np.median([s for r in v for s in r["secs"]])) for k, v in runs.items()}
        gap = max(abs(u - v) for u, v in zip(runs["dense"][0]["losses"], runs["masked"][0]["losses"]))
        res["studies"][study] = dict(
            loss_positions=round(share, 4), step_s=med, speedup=round(med["dense"] / med["masked"], 3), max_loss_gap=gap
        )
        print(
            f"{study}: loss on {share:.0%} of positions; step {med['dense']:.3f} s dense, {med['masked']:.3f} s masked "
            f"({med['dense'] / med['masked']:.2f}x); losses differ by at most {gap:.1e}",
            flush=True,
        )
    write_result(a.out, "sft_loss", res)


if __name__ == "__main__":
    main()
