"""A held-out evaluation's cost with the judge cache against without it, or at two concurrencies, side by side.

    python kernels/bench_eval.py --checkpoint runs/.../sft/final.pt [--tasks 48] [-k 8] [--repeats 2]
    python kernels/bench_eval.py --checkpoint runs/.../sft/final.pt --concurrency 64,256

`Rollouts.evaluate` of the checkpoint on the first `tasks` held-out tasks of the best_of_k study's cpu settings, `k`
samples each, in this process with one torch thread (as the evaluator actor runs it), alternating two arms from the
same weights and sampling streams: `cache` (the default: a `JudgeCache` shared by the evaluation's episodes, one judge
run per distinct final tree) and `no_cache` (a cache that keeps nothing, so every episode is judged). Each arm's wall
time, the CPU of this process (the decode loop and the episodes' threads) and of its children (the sandboxes: tools and
judge runs), the judge runs, and whether the two arms' outcomes agree episode for episode (they must: the judge is a
function of the tree). Written to kernels/results/eval_<device>.json with medians and `children_cpu_ratio`
(no_cache / cache).

With `--concurrency A,B` the arms are instead two concurrencies (episodes in flight, all through one decode loop), both
with the cache: the decode steps' mean rows, wall and CPU of each, `wall_ratio` (A / B) and whether their outcomes agree
(they should, up to float rounding: a row's logits do not depend on the other rows but a matmul's blocking may). Written
to kernels/results/eval_concurrency_<device>.json.
"""

import argparse, resource, sys, time
from pathlib import Path
import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_rollout import device_name, write_result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a composer2 checkpoint (best_of_k's cpu SFT final.pt)")
    ap.add_argument("--tasks", type=int, default=48)
    ap.add_argument("-k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--concurrency",
        default="",
        help="A,B: compare two concurrencies (default: the cache against none, at rl.eval_concurrency)",
    )
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    from composer2.core import C2Error
    from composer2.config import load_config
    from composer2.data.corpus import open_data
    from composer2.model.engine import Engine
    from composer2.tasks.judge import JudgeCache
    from composer2.rl.rollout import Rollouts
    from composer2.studies.registry import resolve_params
    from composer2.tasks.suites import load_suite
    from composer2.model.checkpoint import load_checkpoint

    try:
        cfg = load_config("cpu", overrides=resolve_params("best_of_k", "cpu")["config"])
        model, _ = load_checkpoint(a.checkpoint)
        data = open_data(cfg)
    except (C2Error, FileNotFoundError) as e:
        raise SystemExit(f"bench_eval: error: {e}")
    tasks = load_suite(cfg, "eval")[: a.tasks]
    conc = a.concurrency.split(",") if a.concurrency else []
    if conc and (len(conc) != 2 or not all(x.isdigit() and int(x) > 0 for x in conc)):
        raise SystemExit("bench_eval: error: --concurrency takes two positive integers, A,B")
    conc = [int(x) for x in conc]
    # arm -> (judge cache kept, episodes in flight)
    arms = (
        {f"c{c}": (True, c) for c in conc}
        if conc
        else {"cache": (True, cfg.rl.eval_concurrency), "no_cache": (False, cfg.rl.eval_concurrency)}
    )
    runs, outcomes = {arm: [] for arm in arms}, {}
    for i in range(a.repeats):
        for arm, (keep, c) in arms.items():
            ro = Rollouts(Engine(model.eval()), data, cfg, seed=0)
            if not keep:
                ro.judge_cache = JudgeCache(size=0)  # keeps nothing: every final tree is judged
            r0, c0, t0 = (
                resource.getrusage(resource.RUSAGE_SELF),
                resource.getrusage(resource.RUSAGE_CHILDREN),
                time.perf_counter(),
            )
            res = ro.evaluate(tasks, a.k, concurrency=c, seed=cfg.rl.eval_seed)
            wall = time.perf_counter() - t0
            r1, c1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            ro.server.shutdown()
            jc = ro.judge_cache
            row = dict(
                wall_s=wall,
                self_cpu_s=r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime,
                children_cpu_s=c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime,
                decode_busy_s=ro.server.stats["busy_s"],
                decode_rows=ro.server.stats["decode_rows"] / max(ro.server.stats["decode_steps"], 1),
                concurrency=c,
                judge_runs=jc.misses,
                judge_hits=jc.hits,
                episodes=ro.episodes,
                errors=ro.errors,
                pass_at_1=float(np.mean([np.mean(t["solved"]) for t in res])),
            )
            runs[arm].append(row)
            outcomes.setdefault(arm, [t["solved"] for t in res])
            print(
                f"{arm:9s} wall {wall:6.1f}s  cpu: this process {row['self_cpu_s']:6.1f}s, sandboxes {row['children_cpu_s']:5.1f}s  "
                f"judge runs {jc.misses:4d} of {jc.hits + jc.misses:4d}  pass@1 {row['pass_at_1']:.4f}",
                flush=True,
            )
    med = {arm: {k: float(np.median([r[k] for r in rows])) for k in rows[0]} for arm, rows in runs.items()}
    first, second = list(arms)
    same = outcomes[first] == outcomes[second]
    differ = sum(x != y for p, q in zip(outcomes[first], outcomes[second]) for x, y in zip(p, q))
    out = dict(
        device=device_name(),
        torch=torch.__version__,
        checkpoint=str(a.checkpoint),
        tasks=len(tasks),
        k=a.k,
        runs=runs,
        median=med,
        same_outcomes=same,
        differing_episodes=differ,
        date=time.strftime("%Y-%m-%d"),
    )
    if conc:
        cpu = {arm: med[arm]["self_cpu_s"] + med[arm]["children_cpu_s"] for arm in arms}
        out.update(
            wall_ratio=med[first]["wall_s"] / max(med[second]["wall_s"], 1e-9),
            cpu_ratio=cpu[first] / max(cpu[second], 1e-9),
        )
        print(
            f"wall at concurrency {conc[0]} / at {conc[1]}: {out['wall_ratio']:.2f}x; all CPU {out['cpu_ratio']:.2f}x; decode rows "
            f"{med[first]['decode_rows']:.1f} / {med[second]['decode_rows']:.1f}; episodes with another outcome: {out['differing_episodes']}"
        )
        write_result(a.out, "eval_concurrency", out)
        return
    out.update(
        children_cpu_ratio=med["no_cache"]["children_cpu_s"] / max(med["cache"]["children_cpu_s"], 1e-9),
        total_cpu_ratio=(med["no_cache"]["children_cpu_s"] + med["no_cache"]["self_cpu_s"])
        / max(med["cache"]["children_cpu_s"] + med["cache"]["self_cpu_s"], 1e-9),
        wall_ratio=med["no_cache"]["wall_s"] / max(med["cache"]["wall_s"], 1e-9),
    )
    print(
        f"sandbox CPU without the cache / with it: {out['children_cpu_ratio']:.2f}x; all CPU {out['total_cpu_ratio']:.2f}x; "
        f"wall {out['wall_ratio']:.2f}x (one decode thread); same outcomes: {out['same_outcomes']}"
    )
    write_result(a.out, "eval", out)


if __name__ == "__main__":
    main()
