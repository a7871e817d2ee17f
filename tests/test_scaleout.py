"""Out of one process, on the real pieces: a 2-rank data-parallel stage (gloo) started by Lightning and by `srun` on the
local Slurm cluster, against the 1-rank run at the same global batch (the ranks' rows checked step by step); the 2-rank
resume after SIGKILL; one-line errors for launches Lightning cannot use; pipeline.sh finding the local cluster without
SLURM_CONF; an external Ray head (free port, no dashboard) for `c2 rl`, stopped by its own processes; `make gpu-check`'s
dry run. Slow tier: SFT's ragged loss masks over 2 ranks, FSDP on CPU (and its resume), and slurm/pretrain.sbatch
requeued on USR2.

Every run here computes with one thread per process (OMP_NUM_THREADS=1): the 2 ranks on 2 cores, and the 1-rank
reference alike. A 1-rank run with 2 threads differs from one with 1 thread by up to ~1e-4 in the loss by step 5 (Adam
amplifies the matmuls' summation order); with the threads equal, what is left between 1 and 2 ranks is the gradient
all-reduce's rounding: observed <= 5e-7 (about one float32 ulp at a loss of 7), asserted <= TOL."""

import json, os, signal, socket, subprocess, sys, tempfile, time
from contextlib import contextmanager
from pathlib import Path
import pytest, torch
from conftest import C2, ROOT, RUNS, c2, one_line_error
from composer2.pretrain.stages import read_losses, read_rows, rows_digest
from test_slurm import CONF, cluster  # noqa: F401 (the local cluster fixture: started, and stopped by PID, if not up)

STEPS = 12
TOL = 1e-5  # per-step training loss, 2 ranks vs 1 rank at the same global batch (observed <= 5e-7)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
DDP2 = ("pretrain.strategy=ddp", "pretrain.devices=2")
BIN = Path(sys.executable).parent


def args(runs, data, *extra):
    return [
        "pretrain",
        "--stage",
        "base",
        "--scale",
        "smoke",
        f"data.dir={data}",
        f"pretrain.runs={runs}",
        f"pretrain.base_steps={STEPS}",
        "pretrain.ckpt_every=4",
        "train.eval_every=6",
        "train.eval_tokens=1024",
        *extra,
    ]


def stage(runs):
    return Path(runs) / "smoke" / "base"


def result(runs, r):
    out = stage(runs)
    return dict(
        out=out,
        losses=read_losses(out),
        rows=read_rows(out),
        done=json.loads((out / "done.json").read_text()),
        stdout=r.stdout if r is not None else "",
        lines=len((out / "losses.jsonl").read_text().splitlines()),
    )


@pytest.fixture(scope="module")
def one_rank(smoke_data, tmp_path_factory):
    runs = tmp_path_factory.mktemp("one")
    r = c2(*args(runs, smoke_data), env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-3000:]
    return result(runs, r)


@pytest.fixture(scope="module")
def two_ranks(smoke_data, tmp_path_factory):
    runs = tmp_path_factory.mktemp("two")
    t0 = time.time()
    r = c2(*args(runs, smoke_data, *DDP2), env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-3000:]
    print(f"2-rank DDP stage of {STEPS} steps: {time.time() - t0:.0f}s")
    return result(runs, r)


def expected_rows(data, world):
    "Each step's rows_digest per rank, from the stage's own stream: what the ranks must have trained on."
    from composer2.config import load_config
    from composer2.data.corpus import open_data
    from composer2.pretrain.stages import WindowStream, stage_plan

    cfg = load_config("smoke", overrides=[f"data.dir={data}", f"pretrain.base_steps={STEPS}"])
    plan, d = stage_plan(cfg, "base"), open_data(cfg)
    srcs, w = [d.tokens("prose_train"), d.tokens("code_train")], [plan.prose_fraction, 1 - plan.prose_fraction]
    streams = [
        WindowStream(srcs, w, plan.batch_size, plan.seq_len, cfg.train.seed, rank=r, world=world) for r in range(world)
    ]
    # the record of step s (1-based) is the batch of global step s - 1
    return {s: [rows_digest(st.batch_at(s - 1)[0]) for st in streams] for s in range(1, STEPS + 1)}


def table(a, b, names):
    lines = [f"step  {names[0]:>12s}  {names[1]:>12s}  |diff|"]
    lines += [f"{s:4d}  {a[s]:12.7f}  {b[s]:12.7f}  {abs(a[s] - b[s]):.1e}" for s in sorted(a)]
    return "\n".join(lines)


def test_two_ranks_follow_one_rank(one_rank, two_ranks, smoke_data):
    one, two = one_rank, two_ranks
    print("\n" + table(one["losses"], two["losses"], ("1 rank", "2 ranks DDP")))
    assert sorted(one["losses"]) == sorted(two["losses"]) == list(range(1, STEPS + 1))
    assert one["lines"] == two["lines"] == STEPS  # rank 0 alone writes losses.jsonl: each step once
    diffs = [abs(one["losses"][s] - two["losses"][s]) for s in one["losses"]]
    assert max(diffs) <= TOL, max(diffs)
    # the data: each rank its own rows of the global batch, exactly the 1-rank run's batch between them
    assert two["rows"] == expected_rows(smoke_data, 2) and one["rows"] == expected_rows(smoke_data, 1)
    assert all(len(set(r)) == 2 for r in two["rows"].values())  # the ranks saw different rows at every step
    # one summary: done.json by rank 0, validation reduced over the ranks, printed once
    d1, d2 = one["done"], two["done"]
    assert (d1["ranks"], d2["ranks"], d1["tokens"], d1["steps"]) == (1, 2, d2["tokens"], d2["steps"])
    assert abs(d1["val_loss"] - d2["val_loss"]) < 1e-4 and abs(d1["internal_nll"] - d2["internal_nll"]) < 1e-4
    assert [l for l in two["stdout"].splitlines() if l.startswith("base: ")] == [
        l for l in one["stdout"].splitlines() if l.startswith("base: ")
    ], two["stdout"]
    assert len([l for l in two["stdout"].splitlines() if l.startswith("base: ")]) == 1


@pytest.mark.e2e
def test_two_rank_resume_after_sigkill(smoke_data, tmp_path, two_ranks):
    "SIGKILL of rank 0 (the process Lightning's launcher runs in): rank 1 dies with it; the rerun resumes exactly."
    env = {**os.environ, **ONE_THREAD, "C2_RUNS": RUNS}
    err = open(tmp_path / "stderr", "w")
    p = subprocess.Popen(
        [C2, *args(tmp_path, smoke_data, *DDP2)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err
    )
    log = stage(tmp_path) / "losses.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and p.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 6:
            break
        time.sleep(0.1)
    assert p.poll() is None, f"finished before the kill: {(tmp_path / 'stderr').read_text()[-2000:]}"
    children = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
    ranks = [c for c in children if "pretrain" in Path(f"/proc/{c}/cmdline").read_text()]
    assert len(ranks) == 1, children  # rank 1, started by Lightning
    p.send_signal(signal.SIGKILL)
    assert p.wait(60) == -signal.SIGKILL
    deadline = time.time() + 60
    while time.time() < deadline and _alive(ranks[0]):
        time.sleep(0.2)
    assert not _alive(ranks[0]), "rank 1 outlived its launcher"
    out = stage(tmp_path)
    assert not (out / "done.json").exists() and (out / "last.ckpt").exists()
    step = torch.load(out / "last.ckpt", weights_only=False)["global_step"]
    r = c2(*args(tmp_path, smoke_data, *DDP2), env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads((out / "done.json").read_text())
    print(f"killed after step >= 6, resumed from step {step}")
    assert done["resumed_from"] == step >= 4 and done["steps"] == STEPS and done["ranks"] == 2
    assert read_losses(out) == two_ranks["losses"]  # every step's loss, bit for bit
    assert read_rows(out) == two_ranks["rows"]  # and the same rows on each rank


def _alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def srun(*cmd, timeout=900):
    env = {**os.environ, **ONE_THREAD, "C2_RUNS": RUNS, "SLURM_CONF": str(CONF)}
    return subprocess.run(
        ["srun", "--job-name=c2-scaleout", "--time=15", *cmd],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.e2e
def test_srun_ntasks_per_node(cluster, smoke_data, tmp_path, one_rank, two_ranks):  # noqa: F811
    t0 = time.time()
    r = srun("--ntasks-per-node=2", "--kill-on-bad-exit=1", C2, *args(tmp_path, smoke_data, *DDP2))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = result(tmp_path, r)
    print(
        f"\nsrun --ntasks-per-node=2, {time.time() - t0:.0f}s\n"
        + table(one_rank["losses"], res["losses"], ("1 rank", "srun 2 tasks"))
    )
    # the same 2-rank run as Lightning's own launcher gives, to the bit, rows included; so within TOL of 1 rank
    assert res["losses"] == two_ranks["losses"] and res["rows"] == two_ranks["rows"] and res["lines"] == STEPS
    assert max(abs(one_rank["losses"][s] - res["losses"][s]) for s in res["losses"]) <= TOL
    assert res["done"]["ranks"] == 2 and len([l for l in r.stdout.splitlines() if l.startswith("base: ")]) == 1


@pytest.mark.parametrize(
    "kill", [False, pytest.param(True, marks=pytest.mark.e2e)]
)  # the quick tier: without --kill-on-bad-exit
def test_srun_ntasks_without_per_node_is_one_line(cluster, smoke_data, tmp_path, kill):  # noqa: F811
    "srun -n 2: one line from c2 saying what to use (task 0 says it, the other waits; with --kill-on-bad-exit too)."
    r = srun("-n", "2", *(["--kill-on-bad-exit=1"] if kill else []), C2, *args(tmp_path, smoke_data, *DDP2))
    mine = [l for l in r.stderr.splitlines() if not l.startswith(("srun: ", "slurmstepd"))]  # Slurm's own lines
    assert (r.returncode != 0 if kill else r.returncode == 2) and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert len(mine) == 1 and mine[0].startswith("c2: error: srun --ntasks=2 "), r.stderr
    assert "use `srun --ntasks-per-node=2 c2 pretrain ... pretrain.devices=2`" in mine[0]
    assert not stage(tmp_path).exists()  # it stopped before touching the stage


def test_launch_errors_are_one_line(smoke_data, tmp_path):
    # a global batch that does not split over the ranks, and several nodes without a launcher that starts them
    r = c2(*args(tmp_path, smoke_data, "pretrain.devices=3", "train.batch_size=8"))
    one_line_error(r, "batch of 8 rows does not split over 3 ranks", "multiple of 3")
    r = c2(*args(tmp_path, smoke_data, "pretrain.num_nodes=2"))
    one_line_error(r, "pretrain.num_nodes=2 needs every node started", "srun --nodes=2 --ntasks-per-node=1")


def test_pipeline_finds_the_local_cluster(cluster, tmp_path):  # noqa: F811
    "EXECUTOR=slurm ./pipeline.sh without SLURM_CONF: it finds the local cluster's config as c2 does, and submits."
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env.update(EXECUTOR="slurm", SCALE="smoke", RUNS=str(tmp_path / "p"), C2=C2, C2_SLURM_DIR=str(CONF.parents[1]))
    r = subprocess.run(["bash", str(ROOT / "pipeline.sh")], capture_output=True, text=True, timeout=120, env=env)
    jobs = [l.split(": Slurm job ")[1] for l in r.stdout.splitlines() if ": Slurm job " in l]
    if jobs:  # submitting was the point: cancel the chain
        subprocess.run(["scancel", *jobs], env={**env, "SLURM_CONF": str(CONF)}, timeout=60)
    assert r.returncode == 0 and len(jobs) == 8, r.stdout + r.stderr


# -- slow: SFT over 2 ranks, FSDP on CPU, the sbatch template requeued on USR2

SFT = """
import sys
from pathlib import Path
from composer2.config import load_config
from composer2.pretrain.stages import StagePlan, run_plan

data, out, *over = sys.argv[1:]
over = [f"data.dir={data}", "pretrain.sft_pretrain_mix=0.25", "train.eval_every=4", *over]
cfg = load_config("smoke", overrides=over)
plan = StagePlan("sft", 8, 128, 4, 3e-3, 0.0, 10000.0, train_trunk=True, train_mtp=True, sft=True)
r = run_plan(cfg, plan, Path(out), progress=False)
if not r["rank"]:
    print("done", r["steps"], r["ranks"])
"""


@pytest.mark.slow
def test_sft_two_ranks_follow_one_rank(smoke_data, tmp_path):
    "SFT from scratch (transcripts with their loss masks and code windows, row weights from 1/8 to 1): 2 ranks vs 1."
    script = tmp_path / "sft.py"
    script.write_text(SFT)
    env = {**os.environ, **ONE_THREAD, "C2_RUNS": RUNS}
    res = {}
    for name, extra in [("one", []), ("two", list(DDP2))]:
        r = subprocess.run(
            [sys.executable, script, smoke_data, tmp_path / name, *extra],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=ROOT,
        )
        assert r.returncode == 0 and r.stdout.split() == ["done", "8", "2" if extra else "1"], (
            r.stdout + r.stderr[-3000:]
        )
        res[name] = read_losses(tmp_path / name), read_rows(tmp_path / name)
    print("\n" + table(res["one"][0], res["two"][0], ("SFT 1 rank", "SFT 2 ranks")))
    assert max(abs(res["one"][0][s] - res["two"][0][s]) for s in res["one"][0]) <= TOL
    assert all(len(set(r)) == 2 for r in res["two"][1].values())


@pytest.mark.slow
def test_fsdp_on_cpu(smoke_data, tmp_path, one_rank, two_ranks):
    from composer2.model.checkpoint import load_checkpoint

    r = c2(*args(tmp_path, smoke_data, "pretrain.strategy=fsdp", "pretrain.devices=2"), env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-3000:]
    res = result(tmp_path, r)
    print("\n" + table(one_rank["losses"], res["losses"], ("1 rank", "2 ranks FSDP")))
    assert max(abs(one_rank["losses"][s] - res["losses"][s]) for s in res["losses"]) <= TOL
    assert res["rows"] == two_ranks["rows"] and res["done"]["ranks"] == 2
    fsdp, _ = load_checkpoint(res["out"] / "final.pt")  # gathered from the shards: a plain model
    ddp, _ = load_checkpoint(two_ranks["out"] / "final.pt")
    assert fsdp.state_dict().keys() == ddp.state_dict().keys()
    # killed and resumed from its (full, gathered) last.ckpt: the same run, to the bit
    runs = tmp_path / "killed"
    fsdp2 = ("pretrain.strategy=fsdp", "pretrain.devices=2")
    p = subprocess.Popen(
        [C2, *args(runs, smoke_data, *fsdp2)],
        cwd=ROOT,
        env={**os.environ, **ONE_THREAD, "C2_RUNS": RUNS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log, deadline = stage(runs) / "losses.jsonl", time.time() + 600
    while time.time() < deadline and p.poll() is None and not (log.exists() and len(log.read_text().splitlines()) >= 6):
        time.sleep(0.1)
    p.send_signal(signal.SIGKILL)
    p.wait(60)
    r = c2(*args(runs, smoke_data, *fsdp2), env=ONE_THREAD)
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads((stage(runs) / "done.json").read_text())
    print(f"FSDP killed after step >= 6, resumed from step {done['resumed_from']}")
    assert done["resumed_from"] >= 4 and read_losses(stage(runs)) == res["losses"]


@pytest.mark.slow
def test_pretrain_sbatch_requeued_on_usr2(cluster, smoke_data, tmp_path, two_ranks):  # noqa: F811
    "slurm/pretrain.sbatch on the local cluster with 2 CPU ranks: USR2 mid-run, the job requeues and ends as if not."
    env = {**os.environ, **ONE_THREAD, "C2_RUNS": RUNS, "SCALE": "smoke"}
    env.pop("SLURM_CONF", None)  # the script finds the local cluster's config itself (sbatch here needs it given)
    sub = ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=0", "--cpus-per-task=1"]
    sub += [f"--output={tmp_path}/slurm-%j.out", str(ROOT / "slurm" / "pretrain.sbatch")]
    r = subprocess.run(
        [*sub, *args(tmp_path, smoke_data)[5:]],
        capture_output=True,
        text=True,
        env={**env, "SLURM_CONF": str(CONF)},
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]
    log = stage(tmp_path) / "losses.jsonl"
    deadline = time.time() + 900
    while time.time() < deadline and not (log.exists() and len(log.read_text().splitlines()) >= 5):
        time.sleep(0.5)
    assert log.exists(), sorted(tmp_path.glob("slurm-*.out"))
    subprocess.run(["scancel", "--signal=USR2", job], check=True, env={**env, "SLURM_CONF": str(CONF)})
    done = stage(tmp_path) / "done.json"
    while time.time() < deadline and not done.exists():
        time.sleep(1)
    assert done.exists(), [p.read_text()[-2000:] for p in tmp_path.glob("slurm-*.out")]
    d = json.loads(done.read_text())
    assert d["resumed_from"] >= 5 and d["ranks"] == 2
    assert read_losses(stage(tmp_path)) == two_ranks["losses"] and read_rows(stage(tmp_path)) == two_ranks["rows"]
    deadline = time.time() + 60
    states = []
    while time.time() < deadline and states[-1:] != ["COMPLETED"]:
        q = subprocess.run(
            ["sacct", "-j", job, "-D", "-X", "-n", "-P", "-o", "State"],
            capture_output=True,
            text=True,
            env={**env, "SLURM_CONF": str(CONF)},
        )
        states = q.stdout.split()
        time.sleep(1)
    assert states == ["REQUEUED", "COMPLETED"], states


# -- an external Ray head for `c2 rl`


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid):
    "The live processes of session `sid` (a Ray head started with start_new_session: it and everything it started)."
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.getsid(int(p.name)) == sid and _alive(int(p.name)):
                    out.append(int(p.name))
            except OSError:
                pass
    return out


def stop_session(head):
    "SIGTERM to the head's process group, then SIGKILL to whatever of its session is left: this instance only."
    try:
        os.killpg(head.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        head.wait(60)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.time() + 30
    while time.time() < deadline and session_pids(head.pid):
        time.sleep(0.5)
    for pid in session_pids(head.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if head.poll() is None:
        head.kill()
        head.wait(30)


@contextmanager
def ray_head():
    "`ray start --head` on a free port, dashboard off, in its own temp dir and session; stopped by its own processes."
    why = ""
    # under load the raylet can give up on its agents (it waits 15 s for their ports; the dashboard agent's imports took
    # 31 s at a load of 8 on 2 cores; 2 of 3 tries failed at a load of 5.5) and the head then fails: try again on a
    # fresh port and directory
    for attempt in range(5):
        port, tdir = free_port(), Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # Ray's socket paths must be short
        cmd = [BIN / "ray", "start", "--head", "--port", port, "--num-cpus", "2", "--include-dashboard=false"]
        cmd += ["--node-ip-address", "127.0.0.1", "--temp-dir", tdir, "--disable-usage-stats", "--block"]
        log = open(tdir / "head.log", "w")
        head = subprocess.Popen([str(c) for c in cmd], start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
        t0 = time.time()
        # `ray start` says so once the node has registered (`ray status` here would need the head's token auth mode)
        up = lambda: "Ray runtime started" in (tdir / "head.log").read_text()
        while head.poll() is None and not up() and time.time() - t0 < 180:
            time.sleep(0.5)
        if head.poll() is None and up():
            print(
                f"ray head on 127.0.0.1:{port} (session {head.pid}) up in {time.time() - t0:.0f}s (try {attempt + 1})"
            )
            try:
                yield port, tdir, head
            finally:
                stop_session(head)
            return
        why = (tdir / "head.log").read_text().strip().splitlines()[-1:]
        stop_session(head)
    pytest.fail(f"ray start --head did not come up in 5 attempts: {why}")


@pytest.mark.e2e
def test_external_ray_head(smoke_data, tmp_path):
    with ray_head() as (port, tdir, head):
        r = c2(
            "rl", "--scale", "smoke", f"data.dir={smoke_data}", f"rl.runs={tmp_path}", f"rl.address=127.0.0.1:{port}"
        )
        assert r.returncode == 0, r.stderr[-3000:]
        done = json.loads((tmp_path / "smoke" / "async" / "done.json").read_text())
        assert done["mode"] == "async" and (tmp_path / "smoke" / "async" / "final.pt").exists()
        assert "held-out pass@1" in r.stdout
        # the run's actors ran on this head: their workers logged into its session directory
        workers = list((tdir / "session_latest" / "logs").glob("worker-*"))
        assert workers, sorted(p.name for p in (tdir / "session_latest" / "logs").iterdir())
        alive_during = session_pids(head.pid)
        assert head.pid in alive_during and len(alive_during) > 2  # the head, its GCS, raylet, agents
    assert not session_pids(head.pid), "the head's processes outlived it"
    assert head.poll() is not None


# -- make gpu-check, dry


@pytest.mark.e2e
def test_gpu_check_dry_run():
    r = subprocess.run(["make", "gpu-check", "DRY=1"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    steps = ["env", "compile", "exact", "gemm", "pretrain", "decode", "rl"]
    status = {l.split()[0]: l.split()[1] for l in lines if l.split() and l.split()[0] in steps}
    assert status == dict(env="ok", **{s: "skipped" for s in steps[1:]}), r.stdout
    assert all("no CUDA device here" in l or "dry" in l for l in lines if l.split() and l.split()[0] in steps[1:])
    # (under `make test` the nested make adds its "Leaving directory" line after it)
    summary = Path(next(l for l in lines if l.startswith("gpu-check: ")).rsplit("summary ", 1)[1])
    rec = json.loads(summary.read_text())
    assert rec["dry"] and [s["step"] for s in rec["steps"]] == steps and not str(summary).startswith(str(ROOT))
    compiled = rec["steps"][1]["results"]
    assert compiled["target"] == "sm_90" and compiled["kernels"] == 1  # a real build for Hopper, on the CPU
    assert rec["steps"][4]["results"]["gpu_scale"]["params"]["total"] > 5e8  # the gpu scale's model, on meta
