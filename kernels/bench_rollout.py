"""Rollout throughput and RL step time of the continuous-batching path against the old per-group path, side by side.

    python kernels/bench_rollout.py --checkpoint runs/.../sft/final.pt [--prompts 8] [--group 4] [--steps 6]

Both paths run on the same weights and the same synthetic tasks, in one run:

1. **Rollouts.** `prompts` groups of `group` episodes each. The old path (composer2 at OLD_REV, loaded from git:
   `TurnBatcher` + `RolloutWorkerImpl.rollout_group`) generates one group at a time and re-encodes each episode's whole
   context every turn; the new path (`composer2.rl.rollout.Rollouts` on a `DecodeServer`) runs every group at once
   through one decode loop with per-episode KV caches; then the new path again with `composer2.kernels.native` off
   (`native_off`: PyTorch's decode attention and grouped GEMM in place of the C kernels). Reported: episodes/s and
   sampled tokens/s, and ratios.
2. **RL steps** (unless --steps 0). `c2 rl` at the same settings from the same checkpoint, once with the old code
   (a checkout of OLD_REV), once with this one and once with this one under C2_NATIVE=0, each in its own process; the
   median step time over the steps after the first (the first includes Ray's and the actors' start-up).

The rollout part uses one torch thread, as a rollout worker does. The results are printed and written as JSON to
kernels/results/rollout_<device>.json, with `rollout_speedup` (new / old sampled tokens/s) and `step_speedup`
(old / new median step time).
"""

import argparse, csv, json, os, platform, shutil, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np
import torch

OLD_REV = "8bd8264"  # main before the rollout rewrite (per-group TurnBatcher, full re-prefill every turn)
ROOT = Path(__file__).resolve().parents[1]
# the best_of_k study's cpu settings: single-file synthetic tasks, 96 tokens a turn, a 1024-token context
SETTINGS = [
    "tasks.suite=synthetic",
    "tasks.n_files=1",
    "tasks.n_distractors=0",
    "tasks.max_turns=6",
    "tasks.n_train=200",
    "rl.max_new_tokens=96",
    "rl.max_seq_len=1024",
    "rl.temperature=0.7",
    "rl.init=sft",
]


def device_name() -> str:
    return f"cpu {platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def result_path(out, name: str) -> Path:
    "Where a benchmark's JSON goes: OUT/NAME_<device>-<N>-cores.json."
    return Path(out) / f"{name}_{device_name().split(' (')[0].replace(' ', '-').lower()}-{os.cpu_count()}-cores.json"


def write_result(out, name: str, res: dict) -> Path:
    "Write a benchmark's results as JSON to `result_path(out, name)` and say where."
    path = result_path(out, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {path}")
    return path


def old_checkout(dest: Path, rev: str = OLD_REV) -> Path:
    "composer2 at `rev` (default OLD_REV), extracted with git archive."
    dest.mkdir(parents=True, exist_ok=True)
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "composer2"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=arch, check=True)
    return dest


OLD_ROLLOUTS = """
import dataclasses, json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from composer2.rl.driver import RolloutWorkerImpl
from composer2.config import load_config
from composer2.rl.step import publishable
from composer2.tasks.suites import load_suite
from composer2.model.checkpoint import load_checkpoint
ckpt, scale, prompts, group, settings = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
cfg = load_config(scale, overrides=settings)
model, _ = load_checkpoint(ckpt)
tasks = load_suite(cfg, "train")[:prompts]
w = RolloutWorkerImpl(cfg, 0, dataclasses.asdict(model.cfg), publishable(model.state_dict()), 0, tasks)
t0 = time.perf_counter()
groups = [w.rollout_group(t, group, 0) for t in tasks]            # one group at a time, as the old worker did
dt = time.perf_counter() - t0
print(json.dumps(dict(seconds=dt, episodes=len(tasks) * group, sampled=sum(r.n_sampled for g in groups for r in g.rollouts),
                      fed=w.fed, mean_batch=float(np.mean(w.batcher.batch_sizes)))))
"""


def old_rollouts(args, checkout: Path) -> dict:
    "The old path's rollouts, in a process of its own that imports composer2 at OLD_REV (today's modules moved since)."
    env = {**os.environ, "PYTHONPATH": str(checkout), "C2_SCALES": str(ROOT / "nbs" / "scales")}
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            OLD_ROLLOUTS,
            args.checkpoint,
            args.scale,
            str(args.prompts),
            str(args.group),
            *SETTINGS,
        ],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"old rollouts failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def bench_rollouts(args, ck, checkout) -> dict:
    import dataclasses
    from composer2.data.corpus import open_data
    from composer2.model.engine import Engine
    from composer2.rl.sync import publishable
    from composer2.rl.rollout import Rollouts
    from composer2.rl.actors import build_policy
    from composer2.tasks.suites import load_suite

    torch.set_num_threads(1)
    from composer2.config import load_config

    cfg = load_config(args.scale, overrides=SETTINGS)
    data = open_data(cfg)
    model_cfg = dataclasses.asdict(ck["_model"].cfg)
    published = publishable(ck["_model"].state_dict())
    tasks = load_suite(cfg, "train")[: args.prompts]
    out = {"old": old_rollouts(args, checkout)}
    from composer2.kernels.native import native_off, native_status

    def run(name):
        ro = Rollouts(Engine(build_policy(model_cfg, published, cfg)), data, cfg, seed=0)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(tasks)) as ex:  # every group in flight, as the new worker does
            list(ex.map(lambda t: ro.group(t, args.group, 0), tasks))
        dt = time.perf_counter() - t0
        st = ro.server.stats
        out[name] = dict(
            seconds=dt,
            episodes=ro.episodes,
            sampled=st["sampled"],
            fed=st["fed"],
            errors=ro.errors,
            mean_batch=st["decode_rows"] / max(st["decode_steps"], 1),
            decode_busy_s=st["busy_s"],
        )
        ro.server.shutdown()

    run("new")
    if native_status()["available"]:  # the same path without the C kernels
        with native_off():
            run("new_pytorch")
    for o in out.values():
        o["episodes_per_s"] = o["episodes"] / o["seconds"]
        o["tokens_per_s"] = o["sampled"] / o["seconds"]
    out["rollout_speedup"] = out["new"]["tokens_per_s"] / out["old"]["tokens_per_s"]
    out["episode_speedup"] = out["new"]["episodes_per_s"] / out["old"]["episodes_per_s"]
    return out


def bench_steps(args, checkout: Path, runs: Path) -> dict:
    "Median RL step time of the old and the new code from the same checkpoint and settings."
    res = {}
    for name, path, native in [("old", checkout, "1"), ("new", ROOT, "1"), ("new_pytorch", ROOT, "0")]:
        out = runs / name
        cmd = [
            sys.executable,
            "-c",
            "import sys; from composer2.cli import main; sys.exit(main())",
            "rl",
            "--scale",
            args.scale * SETTINGS,
            f"rl.init={args.checkpoint}",
            f"rl.runs={out}",
            f"rl.steps={args.steps}",
            f"rl.prompts_per_step={args.prompts}",
            f"rl.group_size={args.group}",
            "rl.eval_prompts=2",
            "rl.eval_k=1",
            f"rl.eval_every={args.steps}",
            "tasks.n_eval=2",
            f"rl.ckpt_every={args.steps}",
        ]
        env = {**os.environ, "PYTHONPATH": str(path), "C2_SCALES": str(ROOT / "nbs" / "scales"), "C2_NATIVE": native}
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, cwd=path, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"c2 rl ({name}) failed:\n{p.stderr[-3000:]}")
        rows = list(csv.DictReader(open(next(out.rglob("metrics.csv")))))
        steps = [float(r["step_s"]) for r in rows]
        res[name] = dict(
            step_s=steps,
            median_step_s=float(np.median(steps[1:])),
            wall_s=time.perf_counter() - t0,
            rollout_tokens_per_s=float(np.median([float(r["rollout_tokens_per_s"]) for r in rows[1:]])),
        )
    res["step_speedup"] = res["old"]["median_step_s"] / res["new"]["median_step_s"]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="a composer2 checkpoint (the SFT stage's final.pt)")
    ap.add_argument("--scale", default="cpu", help="the scale the checkpoint was trained at")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6, help="RL steps per path (0: skip the step-time part)")
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    args = ap.parse_args()
    args.checkpoint = str(Path(args.checkpoint).resolve())  # the old path runs in its own checkout directory
    from composer2.core import C2Error
    from composer2.model.checkpoint import load_checkpoint

    try:
        model, ck = load_checkpoint(args.checkpoint)
    except (C2Error, FileNotFoundError) as e:
        raise SystemExit(f"bench_rollout: error: {e}")
    ck["_model"] = model
    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    try:
        checkout = old_checkout(work / "old")
        res = dict(
            device=device_name(),
            torch=torch.__version__,
            old_rev=OLD_REV,
            checkpoint=str(args.checkpoint),
            prompts=args.prompts,
            group=args.group,
            settings=SETTINGS,
        )
        res["rollouts"] = bench_rollouts(args, ck, checkout)
        r = res["rollouts"]
        print(f"{'path':19s} {'s':>7s} {'episodes/s':>11s} {'tokens/s':>9s} {'mean batch':>11s} {'fed tokens':>11s}")
        for k in [k for k in ("old", "new", "new_pytorch") if k in r]:
            o = r[k]
            print(
                f"{k:19s} {o['seconds']:7.1f} {o['episodes_per_s']:11.2f} {o['tokens_per_s']:9.0f} {o['mean_batch']:11.1f} {o['fed']:11d}"
            )
        print(f"rollout_speedup (tokens/s) {r['rollout_speedup']:.2f}x, episodes/s {r['episode_speedup']:.2f}x")
        if args.steps:
            res["steps"] = bench_steps(args, checkout, work / "runs")
            s = res["steps"]
            print(
                f"RL step: old {s['old']['median_step_s']:.1f}s, new {s['new']['median_step_s']:.1f}s, new without the C kernels "
                f"{s['new_pytorch']['median_step_s']:.1f}s (median of steps 2..{args.steps}): step_speedup {s['step_speedup']:.2f}x"
            )
        res["rollout_speedup"] = r["rollout_speedup"]
        res["step_speedup"] = res.get("steps", {}).get("step_speedup")
        write_result(args.out, "rollout", res)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
