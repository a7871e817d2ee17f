"""An RL run's final evaluation, as the run does it, with prefill length buckets against one padded prefill forward.

    python kernels/bench_final_eval.py --checkpoint runs/studies/best_of_k/<key>/cpu/rl_replicate/final.pt [--repeats 1]

When training ends, `run_rl` splits the held-out evaluation between the evaluator and the idle rollout worker: two
processes, one decode loop each, on the two cores. This runs that shape: the best_of_k study's cpu settings, its
held-out tasks x `rl.eval_k` samples halved between two processes started side by side (one torch thread each), with
the checkpoint's weights. Two arms, alternated: `buckets` (the default: the requests a decode loop admits together are
encoded one forward per `length_buckets` group) and `one_forward` (`prefill_floor` huge: every admitted chunk padded
to the longest, as before). Per arm: each half's wall time and the slower one (what blocks the run), prefill forwards,
tokens fed, and whether the two arms' outcomes agree. Written to kernels/results/final_eval_<device>.json with
`speedup` (one_forward / buckets, slower halves, medians).
"""

import argparse, json, subprocess, sys, time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_rollout import device_name, write_result

ARMS = {"buckets": 32, "one_forward": 1 << 30}  # DecodeServer.prefill_floor


def half(checkpoint: str, part: int, floor: int):
    "Evaluate half `part` (0 or 1) of the held-out tasks; print one JSON line."
    import torch

    torch.set_num_threads(1)
    from composer2.config import load_config
    from composer2.data.corpus import open_data
    from composer2.model.engine import Engine
    from composer2.rl.rollout import Rollouts
    from composer2.studies.registry import resolve_params
    from composer2.tasks.suites import load_suite
    from composer2.model.checkpoint import load_checkpoint

    cfg = load_config("cpu", overrides=resolve_params("best_of_k", "cpu")["config"])
    model, _ = load_checkpoint(checkpoint)
    tasks = load_suite(cfg, "eval")
    h = len(tasks) // 2
    ro = Rollouts(Engine(model.eval()), open_data(cfg), cfg, seed=0)
    ro.server.prefill_floor = floor
    t0 = time.perf_counter()
    res = ro.evaluate(tasks[:h] if part == 0 else tasks[h:], cfg.rl.eval_k, seed=cfg.rl.eval_seed)
    wall = time.perf_counter() - t0
    st = ro.server.stats
    ro.server.shutdown()
    print(
        json.dumps(
            dict(
                wall_s=wall,
                prefills=st["prefills"],
                fed=st["fed"],
                decode_steps=st["decode_steps"],
                solved=[t["solved"] for t in res],
            )
        )
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="an RL run's final.pt (best_of_k's cpu rl or rl_replicate)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    ap.add_argument("--half", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--floor", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.half is not None:
        return half(a.checkpoint, a.half, a.floor)
    if not Path(a.checkpoint).is_file():
        raise SystemExit(f"bench_final_eval: error: checkpoint not found: {a.checkpoint}")
    runs, outcomes = {arm: [] for arm in ARMS}, {}
    for _ in range(a.repeats):
        for arm, floor in ARMS.items():
            procs = [
                subprocess.Popen(
                    [sys.executable, __file__, "--checkpoint", a.checkpoint, "--half", str(p), "--floor", str(floor)],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for p in (0, 1)
            ]
            outs = [p.communicate()[0] for p in procs]
            if any(p.returncode for p in procs):
                raise SystemExit(f"bench_final_eval: error: a half of arm {arm} failed")
            parts = [json.loads(o.strip().splitlines()[-1]) for o in outs]
            row = dict(
                halves_s=[p["wall_s"] for p in parts],
                wall_s=max(p["wall_s"] for p in parts),
                prefills=sum(p["prefills"] for p in parts),
                fed=sum(p["fed"] for p in parts),
                decode_steps=sum(p["decode_steps"] for p in parts),
            )
            solved = [s for p in parts for s in p["solved"]]
            row["pass_at_1"] = float(np.mean([np.mean(s) for s in solved]))
            runs[arm].append(row)
            outcomes.setdefault(arm, solved)
            print(
                f"{arm:12s} halves {row['halves_s'][0]:6.1f} / {row['halves_s'][1]:6.1f} s  prefill forwards {row['prefills']:5d}  "
                f"tokens fed {row['fed']:7d}  pass@1 {row['pass_at_1']:.4f}",
                flush=True,
            )
    med = {arm: float(np.median([r["wall_s"] for r in rows])) for arm, rows in runs.items()}
    differ = sum(x != y for p, q in zip(outcomes["buckets"], outcomes["one_forward"]) for x, y in zip(p, q))
    out = dict(
        device=device_name(),
        checkpoint=str(a.checkpoint),
        runs=runs,
        median_wall_s=med,
        speedup=med["one_forward"] / max(med["buckets"], 1e-9),
        differing_episodes=differ,
        date=time.strftime("%Y-%m-%d"),
    )
    print(
        f"final evaluation, one padded prefill forward / length buckets: {out['speedup']:.2f}x; episodes with another outcome: {differ}"
    )
    write_result(a.out, "final_eval", out)


if __name__ == "__main__":
    main()
