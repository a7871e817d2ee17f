"""Throughput of the rollout environment: sandboxed calls per second, latency of one call, workspace creation rate, oracle rollout steps per second.

    python kernels/bench_env.py [--parts workspace latency throughput baseline oracle judge] [--workers 2 4 8] [--calls 300]
                                [--judge-against REV] [--quick]

Each measurement is a function `measure_<name>(args) -> dict` registered in MEASUREMENTS, so a new one (e.g. oracle
rollout steps/s) is one function and one entry. Results are printed, compared with the targets (>= 100 sandboxed
calls/s on 2 cores, p50 of run("true") < 20 ms) and written to kernels/results/env_<cpu>.json."""

import argparse, json, os, platform, re, socket, statistics, subprocess, sys, time
from pathlib import Path
from composer2.core import C2Error
from composer2.config import SandboxConfig
from composer2.sandbox.bwrap import Sandbox, SandboxPool
from composer2.sandbox.workspace import make_workspace, remove_workspace

TARGETS = {"calls_per_s": 100.0, "p50_ms": 20.0}
TASK_FILES = {f"pkg/mod{i}.py": f"def f{i}(x):\n    return x + {i}\n" * 20 for i in range(4)} | {
    "tests/test_mod.py": "from pkg.mod0 import f0\n\ndef test():\n    assert f0(1) == 1\n",
    "README.md": "# task\n",
}
TINY_PY = ["python3", "-S", "-c", "print(sum(range(1000)))"]


def cpu_model() -> str:
    try:
        name = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    return f"{name} ({os.cpu_count()} cores)"


def device_info() -> dict:
    bw = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    return dict(
        cpu=cpu_model(),
        host=socket.gethostname(),
        kernel=platform.release(),
        python=platform.python_version(),
        bwrap=bw,
        load_avg_before=os.getloadavg(),
    )


def pct(xs, q):  # nearest-rank percentile
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * len(xs)) - 1))]


def measure_workspace(a) -> dict:
    "Workspaces created (and removed) per second: from a {path: text} task, and as a copy of a directory."
    n = 50 if a.quick else 300
    res = {}
    src = make_workspace(TASK_FILES)
    try:
        for kind, source in [("from_dict", TASK_FILES), ("copy_dir", src)]:
            t = time.perf_counter()
            wss = [make_workspace(source) for _ in range(n)]
            made = time.perf_counter() - t
            t = time.perf_counter()
            for w in wss:
                remove_workspace(w)
            res[kind] = dict(
                n=n, files=len(TASK_FILES), created_per_s=n / made, removed_per_s=n / (time.perf_counter() - t)
            )
    finally:
        remove_workspace(src)
    return res


def measure_latency(a) -> dict:
    "Sequential latency of one sandboxed call: run('true') and a tiny python command (p50 / p90 / p99, ms)."
    n = 40 if a.quick else a.calls
    ws = make_workspace(TASK_FILES)
    try:
        sb = Sandbox(ws, SandboxConfig())
        out = {}
        for name, cmd in [("true", ["true"]), ("bash_c_true", "true"), ("tiny_python", TINY_PY)]:
            for _ in range(5):
                sb.run(cmd)  # warm caches
            ts = []
            for _ in range(n if name != "tiny_python" else max(20, n // 3)):
                r = sb.run(cmd)
                assert r.ok, r
                ts.append(r.wall_s * 1000)
            out[name] = dict(
                n=len(ts), p50_ms=statistics.median(ts), p90_ms=pct(ts, 90), p99_ms=pct(ts, 99), min_ms=min(ts)
            )
        return out
    finally:
        remove_workspace(ws)


def measure_throughput(a) -> dict:
    "Sandboxed calls per second through a SandboxPool, each call in its own workspace, for several worker counts."
    n = 60 if a.quick else a.calls
    out = {}
    wss = [make_workspace(TASK_FILES) for _ in range(max(a.workers))]
    try:
        for name, cmd in [("true", ["true"]), ("tiny_python", TINY_PY)]:
            for w in a.workers:
                sbs = [Sandbox(ws, SandboxConfig()) for ws in wss[:w]]
                with SandboxPool(w) as pool:
                    pool.run_many([(sbs[i % w], cmd) for i in range(2 * w)])  # warm-up
                    c0, t = os.times(), time.perf_counter()
                    rs = pool.run_many([(sbs[i % w], cmd) for i in range(n)])
                    dt, c1 = time.perf_counter() - t, os.times()
                assert all(r.ok for r in rs), [r for r in rs if not r.ok][:1]
                cpu = (c1.user + c1.system + c1.children_user + c1.children_system) - (
                    c0.user + c0.system + c0.children_user + c0.children_system
                )
                out[f"{name}_w{w}"] = dict(
                    cmd=name,
                    workers=w,
                    calls=n,
                    calls_per_s=n / dt,
                    cpu_ms_per_call=1000 * cpu / n,
                    p50_ms=statistics.median(r.wall_s * 1000 for r in rs),
                )
        return out
    finally:
        for w in wss:
            remove_workspace(w)


def measure_baseline(a) -> dict:
    "The same commands spawned directly on the host (no sandbox): what the sandbox's overhead is measured against."
    n = 40 if a.quick else a.calls
    out = {}
    for name, cmd in [("true", ["true"]), ("tiny_python", [str(Path(sys.base_prefix) / "bin/python3"), *TINY_PY[1:]])]:
        ts, c0 = [], os.times()
        for _ in range(n):
            t = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)
            ts.append((time.perf_counter() - t) * 1000)
        c1 = os.times()
        out[name] = dict(
            n=n,
            p50_ms=statistics.median(ts),
            cpu_ms_per_call=1000 * (c1.children_user + c1.children_system - c0.children_user - c0.children_system) / n,
        )
    return out


def measure_oracle(a) -> dict:
    """Oracle rollout steps per second on the synthetic suite: whole episodes (workspace, turns whose tool calls run in
    the sandbox, the judge's test run, the reward with its ruff check), one step = one agent turn."""
    from composer2.config import load_config
    from composer2.agent.episode import run_episodes
    from composer2.agent.policies import OraclePolicy
    from composer2.tasks.synthetic import synthetic_suite

    cfg = load_config("smoke")
    n = 24 if a.quick else 120
    tasks = synthetic_suite(cfg.tasks, "eval", n)
    run_episodes(tasks[:2], lambda t: OraclePolicy(), cfg, workers=1)  # warm-up: the sandbox's per-process setup
    out = {}
    for w in a.workers:
        t = time.perf_counter()
        eps = run_episodes(tasks, lambda t: OraclePolicy(), cfg, workers=w)
        dt = time.perf_counter() - t
        steps = sum(e.turns for e in eps)
        out[f"w{w}"] = dict(
            workers=w,
            episodes=n,
            steps=steps,
            steps_per_s=steps / dt,
            episodes_per_s=n / dt,
            tool_calls_per_s=sum(e.toolbox.n_calls for e in eps) / dt,
            solved=sum(e.solved for e in eps) / n,
        )
    return out


def measure_judge(a) -> dict:
    """CPU of one judge run (`composer2.tasks.judge.judge`: the tests restored, the runner in a fresh sandbox; once per episode) on
    synthetic tasks, as shipped and solved, in the sandboxes' processes: this checkout's runner and, with
    `--judge-against REV`, that commit's `JUDGE_RUNNER`, interleaved three times (the same verdicts asserted)."""
    import composer2.tasks.judge as J
    from composer2.config import load_config
    from composer2.tasks.synthetic import synthetic_suite

    runners = {"this checkout": J.JUDGE_RUNNER}
    if a.judge_against:
        src = subprocess.run(
            [
                "git",
                "-C",
                str(Path(__file__).resolve().parents[1]),
                "show",
                f"{a.judge_against}:composer2/tasks/judge.py",
            ],
            capture_output=True,
            text=True,
        )
        if src.returncode:
            raise C2Error(f"--judge-against {a.judge_against}: {src.stderr.strip()[:200]}")
        q = "'" * 3  # the runner is the module's one triple-quoted raw string: JUDGE_RUNNER = r<q>...<q>
        i, ns = src.stdout.index(f"JUDGE_RUNNER = r{q}"), {}
        exec(src.stdout[i : src.stdout.index(q + "\n", i) + 4], ns)
        runners[a.judge_against] = ns["JUDGE_RUNNER"]
    tasks = synthetic_suite(load_config("smoke").tasks, "eval", 10 if a.quick else 30)
    runs = {k: [] for k in runners}
    try:
        for _ in range(3):
            for name, runner in runners.items():
                J.JUDGE_RUNNER, verdicts, c0, t = runner, [], os.times(), time.perf_counter()
                for task in tasks:
                    for files in (task.files, task.solution):
                        ws = make_workspace(files)
                        try:
                            verdicts.append(J.judge(task, ws, Sandbox(ws, SandboxConfig())).solved)
                        finally:
                            remove_workspace(ws)
                dt, c1 = time.perf_counter() - t, os.times()
                assert verdicts == [False, True] * len(tasks), f"{name}: wrong verdicts"
                runs[name].append(
                    dict(
                        cpu_ms=1000
                        * (c1.children_user + c1.children_system - c0.children_user - c0.children_system)
                        / len(verdicts),
                        wall_ms=1000 * dt / len(verdicts),
                    )
                )
    finally:
        J.JUDGE_RUNNER = runners["this checkout"]
    out = {
        k: dict(
            judged=2 * len(tasks),
            repeats=len(v),
            cpu_ms_per_judge=statistics.median(r["cpu_ms"] for r in v),
            wall_ms_per_judge=statistics.median(r["wall_ms"] for r in v),
        )
        for k, v in runs.items()
    }
    if a.judge_against:
        out["ratio"] = dict(cpu=out[a.judge_against]["cpu_ms_per_judge"] / out["this checkout"]["cpu_ms_per_judge"])
    return out


MEASUREMENTS = {
    "workspace": measure_workspace,
    "latency": measure_latency,
    "throughput": measure_throughput,
    "baseline": measure_baseline,
    "oracle": measure_oracle,
    "judge": measure_judge,
}


def summary(res: dict) -> dict:
    "The numbers the targets are about, with their ratios (>= 1 means met)."
    s = {}
    if "throughput" in res:
        best = max(res["throughput"].values(), key=lambda r: r["calls_per_s"] if r["cmd"] == "true" else -1)
        py = max((r for r in res["throughput"].values() if r["cmd"] == "tiny_python"), key=lambda r: r["calls_per_s"])
        s.update(
            calls_per_s_true=best["calls_per_s"],
            best_workers=best["workers"],
            calls_per_s_tiny_python=py["calls_per_s"],
            calls_ratio=best["calls_per_s"] / TARGETS["calls_per_s"],
        )
    if "latency" in res:
        p50 = res["latency"]["true"]["p50_ms"]
        s.update(p50_ms_true=p50, p99_ms_true=res["latency"]["true"]["p99_ms"], p50_ratio=TARGETS["p50_ms"] / p50)
    if "workspace" in res:
        s.update(workspaces_per_s=res["workspace"]["from_dict"]["created_per_s"])
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=list(MEASUREMENTS), choices=list(MEASUREMENTS))
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument(
        "--judge-against", default="", metavar="REV", help="judge: also time the runner of this git revision"
    )
    ap.add_argument("--quick", action="store_true", help="few repetitions (a smoke check of the script)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    a = ap.parse_args()
    dev = device_info()
    print(
        f"device: {dev['cpu']}   kernel {dev['kernel']}   {dev['bwrap']}   python {dev['python']}   load {dev['load_avg_before']}"
    )
    res = {}
    try:
        for name in a.parts:
            t = time.perf_counter()
            res[name] = MEASUREMENTS[name](a)
            print(f"\n== {name} ({time.perf_counter() - t:.1f} s)")
            for k, v in res[name].items():
                print(
                    f"  {k:18s} "
                    + "  ".join(f"{kk}={vv:.2f}" if isinstance(vv, float) else f"{kk}={vv}" for kk, vv in v.items())
                )
    except C2Error as e:
        sys.exit(f"bench_env: error: {e}")
    s = summary(res)
    print("\n== against the targets")
    if "calls_ratio" in s:
        print(
            f"  sandboxed calls/s: {s['calls_per_s_true']:.0f} (workers={s['best_workers']}; tiny python {s['calls_per_s_tiny_python']:.0f}) "
            f"vs target {TARGETS['calls_per_s']:.0f}: {s['calls_ratio']:.2f}x {'MET' if s['calls_ratio'] >= 1 else 'MISSED'}"
        )
    if "p50_ratio" in s:
        print(
            f"  run('true') p50: {s['p50_ms_true']:.1f} ms (p99 {s['p99_ms_true']:.1f}) vs target < {TARGETS['p50_ms']:.0f} ms: "
            f"{s['p50_ratio']:.2f}x {'MET' if s['p50_ratio'] >= 1 else 'MISSED'}"
        )
    if "workspaces_per_s" in s:
        print(f"  workspaces/s: {s['workspaces_per_s']:.0f}")
    dev["load_avg_after"] = os.getloadavg()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", dev["cpu"].lower()).strip("-")[:40]
    path = out / f"env_{slug}.json"
    if a.quick:
        print("(--quick: results not written)")
        return
    path.write_text(json.dumps(dict(device=dev, targets=TARGETS, summary=s, results=res), indent=1) + "\n")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
