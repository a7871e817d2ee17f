"""Where an RL step's CPU goes: every process of a `c2 rl` run, read from /proc over a window of its steps.

    python kernels/bench_rl_cpu.py --checkpoint runs/.../sft/final.pt [--steps 12] [--skip 45] [--window 40]

On a small machine the rollout worker's decode loop, the sandboxes it starts, the trainer and Ray's own processes share
the cores, and a part's time per step says little about what it costs the others. This runs `c2 rl` with the
best_of_k study's cpu settings (its `studies/configs/best_of_k/cpu.yaml`) from `--checkpoint`, waits `--skip` seconds
(start-up and the first steps), then reads the CPU time of the machine (/proc/stat) and of every process the run
started (/proc/PID/stat: its own user and system time, and that of its children it has reaped -- the sandboxes' short
processes) at the start and the end of `--window` seconds, and stops the run. Written to
kernels/results/rl_cpu_<device>.json: each process's share of the machine and of one core, the machine's idle share.
Linux only; run it with nothing else running.
"""

import argparse, os, signal, subprocess, sys, tempfile, time
from pathlib import Path
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_rollout import device_name, write_result


def machine() -> dict:
    "Jiffies of the whole machine by kind (/proc/stat's first line)."
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    return dict(zip(names, map(int, open("/proc/stat").readline().split()[1:9])))


def processes() -> dict:
    "pid -> (ppid, name, [utime, stime, cutime, cstime]) of every readable process."
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            name = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()[:60]
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()  # the fields after the command name, which may hold spaces
        out[int(d.name)] = (
            int(rest[1]),
            name or stat[stat.index("(") + 1 : stat.rindex(")")],
            [int(x) for x in rest[11:15]],
        )
    return out


def descendants(root: int, procs: dict) -> set:
    "`root` and every process below it."
    kids, seen, todo = {}, {root}, [root]
    for pid, (ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    while todo:
        for k in kids.get(todo.pop(), []):
            if k not in seen:
                seen.add(k)
                todo.append(k)
    return seen


def label(name: str) -> str:
    "A process's role in the run, from its command line."
    for key, role in [
        ("RolloutWorkerImpl", "rollout worker"),
        ("TrainerImpl", "trainer"),
        ("Reconciler", "reconciler"),
        ("c2 rl", "driver (c2 rl)"),
        ("raylet", "ray: raylet"),
        ("gcs_server", "ray: gcs"),
        ("ray", "ray: other"),
    ]:
        if key in name:
            return role
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--checkpoint", required=True, help="the SFT checkpoint RL starts from (best_of_k's cpu SFT final.pt)"
    )
    ap.add_argument("--steps", type=int, default=12, help="RL steps to schedule (the run is stopped after the window)")
    ap.add_argument("--skip", type=float, default=45.0, help="seconds to wait before the window")
    ap.add_argument("--window", type=float, default=40.0, help="seconds measured")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    a = ap.parse_args()
    if not Path(a.checkpoint).is_file():
        sys.exit(f"bench_rl_cpu: error: no checkpoint at {a.checkpoint}")
    cfg = yaml.safe_load((ROOT / "studies/configs/best_of_k/cpu.yaml").read_text())["config"]
    runs = tempfile.mkdtemp(prefix="c2-rl-cpu-")
    ov = [f"{k}={v}" for k, v in cfg.items()] + [
        f"rl.init={Path(a.checkpoint).resolve()}",
        f"rl.steps={a.steps}",
        "rl.eval_at_start=false",
        f"rl.eval_every={a.steps}",
        f"rl.runs={runs}",
        "rl.name=cpu",
    ]
    c2 = Path(sys.executable).parent / "c2"
    log = open(Path(runs) / "c2.log", "w")
    proc = subprocess.Popen(
        [str(c2), "rl", "--scale", "cpu", *ov], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        time.sleep(a.skip)
        if proc.poll() is not None:
            sys.exit(f"bench_rl_cpu: error: c2 rl ended early (rc {proc.returncode}); see {log.name}")
        m0, p0, t0 = machine(), processes(), time.perf_counter()
        time.sleep(a.window)
        m1, p1, dt = machine(), processes(), time.perf_counter() - t0
        mine = descendants(proc.pid, p1) | (descendants(proc.pid, p0) & set(p1))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    total = sum(m1[k] - m0[k] for k in m1)
    roles = {}
    for pid in mine:
        _, name, t1 = p1[pid]
        t0_ = p0[pid][2] if pid in p0 and p0[pid][1] == name else [0, 0, 0, 0]
        d = [x - y for x, y in zip(t1, t0_)]
        r = roles.setdefault(label(name), dict(own_user=0, own_system=0, children_user=0, children_system=0))
        for k, v in zip(["own_user", "own_system", "children_user", "children_system"], d):
            r[k] += v
    rows = {
        k: {**v, "share_of_machine": sum(v.values()) / total, "cores": sum(v.values()) / total * os.cpu_count()}
        for k, v in sorted(roles.items(), key=lambda kv: -sum(kv[1].values()))
    }
    kinds = {k: (m1[k] - m0[k]) / total for k in m1}
    print(f"device: {device_name()}; a window of {dt:.1f} s of `c2 rl` (best_of_k's cpu settings), {total} jiffies")
    for k, v in rows.items():
        print(
            f"  {k:16s} {v['cores']:.2f} cores ({v['share_of_machine']:.1%} of the machine)"
            + (
                f", {(v['children_user'] + v['children_system']) / total * os.cpu_count():.2f} of them in its children"
                if v["children_user"] + v["children_system"]
                else ""
            )
        )
    print(f"  idle             {kinds['idle']:.1%} of the machine; kernel (system) {kinds['system']:.1%}")
    write_result(
        a.out,
        "rl_cpu",
        dict(
            device=device_name(),
            checkpoint=str(a.checkpoint),
            window_s=dt,
            skip_s=a.skip,
            jiffies=total,
            machine=kinds,
            roles=rows,
            overrides=ov,
        ),
    )


if __name__ == "__main__":
    main()
