"""The RL trainer's step on real groups, each row encoded whole against the rows encoded as prefix trees.

    python kernels/bench_trainer.py --checkpoint runs/.../sft/final.pt [--prompts 8] [--group 8] [--repeats 3] [--threads 1]

`rl_step`'s forward and backward over a step's segments bound an RL step at cpu scale (kernels/README.md). The rollouts
of a group start from one prompt and often go on alike for a while, so `rl_step` encodes a group's rows as a prefix
tree: what a set of rows shares goes through the model once (`composer2.rl.step.SharedPrefix`). This samples
`prompts` groups of `group` episodes from the checkpoint through the rollout path (`Rollouts` on a `DecodeServer`, the
best_of_k study's cpu settings at temperature 1.0) and runs the same `rl_step` on them both ways, interleaved, from
the same weights and a fresh Adam each time: `whole` (`share_prefix=False`) and `shared` (the default). Written to
kernels/results/trainer_<device>.json with the positions and forward calls each path encodes, the medians, `speedup`
(whole / shared) and the largest differences between the two paths' loss and per-token log-probs.
"""

import argparse, copy, json, sys, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from composer2.rl.actors import build_policy
from composer2.core import C2Error
from composer2.config import load_config
from composer2.rl.step import collate, rl_step, token_logprobs, _micro_batches
from bench_rollout import SETTINGS, device_name, write_result


def sample_groups(model, cfg, prompts: int, group: int) -> list:
    "`prompts` groups of `group` episodes of the first train tasks, every group in flight, as a rollout worker runs them."
    from composer2.data.corpus import open_data
    from composer2.model.engine import Engine
    from composer2.rl.rollout import Rollouts
    from composer2.tasks.suites import load_suite

    ro = Rollouts(Engine(copy.deepcopy(model).eval()), open_data(cfg), cfg, seed=0)
    try:
        with ThreadPoolExecutor(prompts) as ex:
            return list(ex.map(lambda t: ro.group(t, group, 0), load_suite(cfg, "train")[:prompts]))
    finally:
        ro.server.shutdown()


def encoded_positions(model, groups, micro_tokens: int = 8192) -> dict:
    """Positions the trainer's forward encodes over the step (padding included), each row whole and as prefix trees, in
    rl_step's micro-batches: counted at the model's first block, with the forward calls."""
    rows = sorted(
        [(gi, s) for gi, g in enumerate(groups) for r in g.rollouts for s in r.segments if s.n_sampled],
        key=lambda x: (x[0], len(x[1].ids)),
    )
    lens = [len(s.ids) for _, s in rows]
    seen = []
    hook = model.blocks[0].register_forward_hook(lambda m, i, o: seen.append(i[0].shape[0] * i[0].shape[1]))
    out = {}
    try:
        for path, share in (("whole", False), ("shared", True)):
            seen.clear()
            with torch.no_grad():
                for ch in _micro_batches(list(range(len(rows))), lens, micro_tokens, [g for g, _ in rows]):
                    token_logprobs(model, collate([rows[i][1] for i in ch]), share=share)
            out[path], out[f"{path}_forward_calls"] = sum(seen), len(seen)
    finally:
        hook.remove()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a composer2 checkpoint (the SFT stage's final.pt)")
    ap.add_argument("--scale", default="cpu")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (a trainer actor uses 1)")
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    try:
        ck = torch.load(a.checkpoint, map_location="cpu", weights_only=False)
    except FileNotFoundError as e:
        raise SystemExit(f"bench_trainer: error: {e}")
    try:
        cfg = load_config(a.scale, overrides=SETTINGS + [f"rl.init={a.checkpoint}", "rl.temperature=1.0"])
    except C2Error as e:
        raise SystemExit(f"bench_trainer: error: {e}")
    model = build_policy(ck["model_cfg"], ck["model"], cfg)
    t0 = time.perf_counter()
    groups = sample_groups(model, cfg, a.prompts, a.group)
    for g in groups:  # rewards of both signs in every group, so every row carries a gradient
        for j, r in enumerate(g.rollouts):
            r.reward = float(j % 3 == 0)
    print(f"sampled {sum(len(g.rollouts) for g in groups)} episodes in {time.perf_counter() - t0:.1f}s")
    start = copy.deepcopy(model.state_dict())

    def run(shared: bool) -> dict:
        model.load_state_dict(start)
        return rl_step(
            model, torch.optim.Adam(model.parameters(), lr=1e-4), groups, cfg.rl, None, version=0, share_prefix=shared
        )

    times, loss = {"whole": [], "shared": []}, {}
    for i in range(a.repeats + 1):  # the first round warms up
        for path in times:
            m = run(path == "shared")
            loss[path] = m["loss"]
            if i:
                times[path].append(m["train_seconds"])
    med = {k: float(np.median(v)) for k, v in times.items()}
    model.load_state_dict(start)
    model.eval()
    segs = [s for r in groups[0].rollouts for s in r.segments]
    with torch.no_grad():
        b = collate(segs)
        diff = float((token_logprobs(model, b, share=True)[0] - token_logprobs(model, b, share=False)[0]).abs().max())
    out = dict(
        device=device_name(),
        torch=torch.__version__,
        threads=a.threads,
        prompts=a.prompts,
        group=a.group,
        positions=encoded_positions(model, groups),
        seconds=times,
        median_s=med,
        speedup=med["whole"] / med["shared"],
        loss=loss,
        max_logprob_diff=diff,
        date=time.strftime("%Y-%m-%d"),
    )
    print(json.dumps(out, indent=1))
    write_result(a.out, "trainer", out)


if __name__ == "__main__":
    main()
