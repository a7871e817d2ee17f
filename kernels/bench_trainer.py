"""The RL trainer's step on one batch, attention through an explicit padding mask against SDPA's causal kernel.

    python kernels/bench_trainer.py --checkpoint runs/.../sft/final.pt [--episodes 64] [--repeats 3] [--threads 1]

`rl_step`'s forward and backward over a step's segments is what bounds an RL step at cpu scale (kernels/README.md).
`collate` pads segments on the right, so causal attention alone keeps real tokens from padding; before, the trainer
passed `valid` and the model built a [B, 1, T, T] mask, which makes SDPA compute every block. This runs the same
batch through `rl_step` both ways, interleaved, from the same weights and Adam state each time: `mask` (the model is
handed `valid`, as before) and `causal` (`token_logprobs` as it is now). The batch: `episodes` segments of 250-1024
tokens (the best_of_k cpu step's 1024-token context) of random tokens with the checkpoint's own routing for replay,
about a third of the positions sampled, in turns. Written to kernels/results/trainer_<device>.json with the medians,
`speedup` (mask / causal) and the largest difference between the two paths' per-token log-probs.
"""
import argparse, copy, json, random, sys, time
from pathlib import Path
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from composer2.actors import build_policy
from composer2.config import load_config
from composer2.rl import Group, Rollout, Segment, collate, rl_step, token_logprobs
from bench_rollout import device_name, result_path

def make_groups(model, episodes: int, group: int, seed: int = 0) -> list[Group]:
    "Random-token segments of 250-1024 tokens, sampled in turns (~30% of positions), with the model's routing for replay."
    rng, V = random.Random(seed), model.cfg.vocab_size
    def seg(n):
        ids = [rng.randrange(V) for _ in range(n)]
        with torch.no_grad(): experts = model(torch.tensor([ids]), capture=True).experts[0, :-1].numpy()
        mask, i = [0] * n, rng.randrange(60, 120)
        while i < n:   # a turn: ~60-200 tokens of context (prompt, tool output), then 20-80 sampled
            for j in range(i, min(n, i + rng.randrange(20, 80))): mask[j] = 1
            i += rng.randrange(80, 200)
        return Segment(ids, mask, [-1.0 if m else 0.0 for m in mask], [0 if m else -1 for m in mask], experts)
    return [Group(f"p{g}", [Rollout([seg(rng.randrange(250, 1025))], reward=float(rng.random() < 0.3)) for _ in range(group)], 0)
            for g in range(episodes // group)]

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a composer2 checkpoint (the SFT stage's final.pt)")
    ap.add_argument("--scale", default="cpu")
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a trainer actor uses 1)")
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ck = torch.load(a.checkpoint, map_location="cpu", weights_only=False)
    cfg = load_config(a.scale, overrides=["rl.max_seq_len=1024"])
    model = build_policy(ck["model_cfg"], ck["model"], cfg)
    groups = make_groups(model, a.episodes, a.group)
    n_tok = sum(len(s.ids) for g in groups for r in g.rollouts for s in r.segments)
    start = copy.deepcopy(model.state_dict())
    real_forward = model.forward
    def run(path):
        """One rl_step from the same weights and a fresh Adam. `mask`: the model is handed a `valid` wherever the trainer
        now passes none, so it builds the explicit [B, 1, T, T] mask the old trainer's forward built (all-true here:
        the same cost, and for real tokens the same attention as the padding mask)."""
        model.load_state_dict(start)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        if path == "mask":   # the old call: model(ids, valid=valid, ...) whatever the padding
            def fwd(idx, valid=None, **kw):
                if valid is None and kw.get("cache") is None: valid = torch.ones_like(idx, dtype=torch.bool)
                return real_forward(idx, valid=valid, **kw)
            model.forward = fwd
        try: return rl_step(model, opt, groups, cfg.rl, None, version=0)
        finally: model.forward = real_forward
    times = {"mask": [], "causal": []}
    for i in range(a.repeats + 1):   # the first round warms up
        for path in times:
            m = run(path)
            if i: times[path].append(m["train_seconds"])
    med = {k: float(np.median(v)) for k, v in times.items()}
    # the two paths' log-probs on the same micro-batch, same weights
    model.load_state_dict(start); model.eval()
    segs = [s for g in groups for r in g.rollouts for s in r.segments][:8]
    b = collate(segs)
    with torch.no_grad():
        lp_c = token_logprobs(model, b)[0]
        model.forward = lambda idx, valid=None, **kw: real_forward(idx, valid=b["valid"][:, :-1] if valid is None else valid, **kw)
        lp_m = token_logprobs(model, b)[0]
        model.forward = real_forward
    diff = float((lp_c - lp_m).abs().max())
    out = dict(device=device_name(), torch=torch.__version__, threads=a.threads, episodes=a.episodes, tokens=n_tok,
               seconds=times, median_s=med, speedup=med["mask"] / med["causal"], max_logprob_diff=diff,
               date=time.strftime("%Y-%m-%d"))
    print(json.dumps(out, indent=1))
    dest = result_path(a.out, "trainer")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=1) + "\n")
    print(f"-> {dest}")

if __name__ == "__main__":
    main()
