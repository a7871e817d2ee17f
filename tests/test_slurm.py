"""A smoke study through a real Slurm cluster brought up by slurm/cluster.sh (munge, MariaDB, slurmdbd, slurmctld,
slurmd on this machine): a plain job, a sweep as one job array, a preempted job that resumes from its checkpoint,
and the daemons stopped by PID. Skipped, with the reason, where Slurm cannot start here; CI makes that a failure."""

import json, os, shutil, subprocess, time
from pathlib import Path
import pytest
from conftest import ROOT, c2

SCRIPT = ROOT / "slurm" / "cluster.sh"
SLURM_DIR = Path(os.environ.get("C2_SLURM_DIR", "/var/tmp/c2-slurm"))
CONF = SLURM_DIR / "etc" / "slurm.conf"
DAEMONS = ["run/slurmd.pid", "run/slurmctld.pid", "run/slurmdbd.pid", "mysql-run/mariadbd.pid", "run/munged.pid"]


def sh(*args, timeout=180, **kw):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, **kw)


def controller_up():
    r = subprocess.run(
        ["scontrol", "ping"], capture_output=True, text=True, timeout=20, env=dict(os.environ, SLURM_CONF=str(CONF))
    )
    return r.returncode == 0 and "UP" in r.stdout


@pytest.fixture(scope="module")
def cluster():
    "The local cluster: reused if it already answers, else started here and stopped (by PID) at the end."
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurm/cluster.sh up)")
    missing = [b for b in ["slurmctld", "slurmd", "slurmdbd", "sbatch", "munged", "mariadbd"] if not shutil.which(b)]
    if missing:
        pytest.skip(f"Slurm packages missing ({', '.join(missing)}): run `make setup` as root")
    started = False
    if not (CONF.is_file() and controller_up()):
        t0 = time.time()
        r = sh("up")
        if r.returncode != 0:
            pytest.skip(f"slurm/cluster.sh up failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
        print(f"cluster up in {time.time() - t0:.1f}s: {r.stdout.strip()}")
        started = True
    yield
    if started:
        sh("down")


def env_for(tmp_path):
    return {"C2_JOBS": str(tmp_path / "jobs"), "C2_RESULTS": str(tmp_path / "results")}  # SLURM_CONF is found by c2


def status(env):
    r = c2("study", "status", "--json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def settled(env, timeout=60):
    "The jobs' states once none is PENDING or RUNNING: submitit's result file is written before Slurm records the end of the job."
    deadline = time.time() + timeout
    while True:
        jobs = status(env)
        if all(j["state"] not in ("PENDING", "RUNNING", "COMPLETING") for j in jobs) or time.time() > deadline:
            return jobs
        time.sleep(1)


def sacct(job_id):
    r = subprocess.run(
        ["sacct", "-j", str(job_id).split("_")[0], "-D", "-X", "-n", "-P", "-o", "JobID,State,Partition"],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ, SLURM_CONF=str(CONF)),
    )
    assert r.returncode == 0, r.stderr
    return [l.split("|") for l in r.stdout.splitlines() if l]


def test_plain_job(cluster, tmp_path):
    env = env_for(tmp_path)
    r = c2(
        "study",
        "submit",
        "kl_estimators",
        "--scale",
        "smoke",
        "--executor",
        "slurm",
        "--out",
        str(tmp_path / "plain"),
        "--wait",
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((tmp_path / "plain" / "results.json").read_text())
    # the job ran the study to the end (what its claims say is the study's business: tests/test_studies.py)
    assert res["status"] == "ok" and res["claims"] and "verdicts" in res
    (job,) = settled(env)
    assert job["executor"] == "slurm" and job["state"] == "COMPLETED"
    assert sacct(job["job_id"]) == [[job["job_id"], "COMPLETED", "debug"]]  # the partition of the scale file
    # its log files exist and `c2 study status` lists them under the job
    assert all(Path(p).is_file() for p in job["logs"]) and job["logs"][-1].endswith("plain/kl_estimators.log")
    assert "logs: " + "  ".join(job["logs"]) in c2("study", "status", env=env).stdout
    # sacct unreachable (not on PATH): the state the job's results.json tells, not UNKNOWN
    (job,) = status({**env, "PATH": str(tmp_path / "no-sacct-here")})
    assert job["state"] == "COMPLETED (results.json)", job


@pytest.mark.e2e  # the quick tier sweeps through submitit's local executor (tests/test_studies.py)
def test_sweep_is_one_job_array(cluster, tmp_path):
    env = env_for(tmp_path)
    r = c2(
        "study",
        "submit",
        "length_penalty",
        "--scale",
        "smoke",
        "--executor",
        "slurm",
        "--sweep",
        "lam=0.002,0.004",
        "--out",
        str(tmp_path / "sweep"),
        "--cpus",
        "1",
        "--time",
        "5",
        "--wait",
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = settled(env)
    ids = [j["job_id"] for j in jobs]
    array = ids[0].split("_")[0]
    assert ids == [f"{array}_0", f"{array}_1"], ids  # one array, two tasks
    assert [j["state"] for j in jobs] == ["COMPLETED", "COMPLETED"]
    assert sorted(row[0] for row in sacct(array)) == ids
    for j in jobs:
        res = json.loads((Path(j["out"]) / "results.json").read_text())
        assert res["status"] == "ok" and res["params"]["lam"] == j["params"]["lam"]
    assert {j["params"]["lam"] for j in jobs} == {0.002, 0.004}
    # the arms side by side: a row per arm, a column per claim
    index = tmp_path / "sweep" / "sweep" / "index.md"
    assert f"sweep index: {index}" in r.stdout
    rows = [l for l in index.read_text().splitlines() if l.startswith("| ")]
    claims = json.loads((Path(jobs[0]["out"]) / "results.json").read_text())["claims"]
    assert rows[0] == "| " + " | ".join(["lam", "arm", "status", *(c["id"] for c in claims)]) + " |", rows
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| 0.002", "| 0.004"] and all(" ok: " in r for r in rows[1:])


def test_preempted_job_resumes_from_its_checkpoint(cluster, tmp_path):
    env = env_for(tmp_path)
    out = tmp_path / "preempt"
    # enough samples per KL point that the job is still running after its first point is checkpointed
    r = c2(
        "study",
        "submit",
        "kl_estimators",
        "--scale",
        "smoke",
        "--executor",
        "slurm",
        "--out",
        str(out),
        "-p",
        "n_samples=4000000",
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (job,) = status(env)
    ck = out / "checkpoint.json"
    deadline = time.time() + 120
    while time.time() < deadline and not (ck.is_file() and json.loads(ck.read_text())["units"]):
        time.sleep(0.2)
    assert ck.is_file(), "the job never checkpointed a KL point"
    done_before = len(json.loads(ck.read_text())["units"])
    # what a preemption (or the time limit) does: Slurm signals USR2, submitit checkpoints and requeues the job
    subprocess.run(["scancel", "--signal=USR2", job["job_id"]], check=True, env=dict(os.environ, SLURM_CONF=str(CONF)))
    deadline = time.time() + 240
    while time.time() < deadline and status(env)[0]["state"] != "COMPLETED":
        time.sleep(1)
    states = [row[1] for row in sacct(job["job_id"])]
    assert states == ["REQUEUED", "COMPLETED"], states
    res = json.loads((out / "results.json").read_text())
    n_units = res["params"]["n_points"] + res["params"]["cat_levels"]
    assert res["status"] == "ok" and 1 <= done_before <= res["metrics"]["resumed_units"] < n_units, (
        done_before,
        res["metrics"],
    )
    log = (out / "kl_estimators.log").read_text()
    assert (
        "checkpoint: 0 finished KL points" in log
        and f"checkpoint: {res['metrics']['resumed_units']} finished KL points" in log
    )


@pytest.mark.e2e
def test_pipeline_is_a_chain_of_dependent_jobs(cluster, tmp_path):
    "EXECUTOR=slurm ./pipeline.sh at smoke scale: eight jobs, each starting after the one before it ended, ending in the evaluation."
    import sys

    runs = tmp_path / "pipeline"
    env = dict(
        os.environ,
        SLURM_CONF=str(CONF),
        EXECUTOR="slurm",
        SCALE="smoke",
        RUNS=str(runs),
        C2=str(Path(sys.executable).parent / "c2"),
    )
    tiny = [
        "pretrain.base_steps=4",
        "pretrain.cpt_steps=2",
        "pretrain.mtp_steps=2",
        "pretrain.long_steps=2",
        "pretrain.sft_steps=4",
        "pretrain.sft_oracle=4",
        "tasks.n_eval=4",
        "rl.steps=2",
    ]
    r = subprocess.run(["bash", str(ROOT / "pipeline.sh"), *tiny], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = [l.split(": Slurm job ") for l in r.stdout.splitlines() if ": Slurm job " in l]
    assert [n for n, _ in jobs] == ["data", "base", "cpt", "mtp", "long", "sft", "rl", "eval"], r.stdout
    deadline, last = time.time() + 900, jobs[-1][1]
    while time.time() < deadline and (not sacct(last) or sacct(last)[0][1] in ("PENDING", "RUNNING", "COMPLETING")):
        time.sleep(2)
    q = subprocess.run(
        ["sacct", "-j", ",".join(j for _, j in jobs), "-X", "-n", "-P", "-o", "JobID,State,Start,End"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    rows = {l.split("|")[0]: l.split("|")[1:] for l in q.stdout.splitlines() if l}
    states = [rows[j][0] for _, j in jobs]
    assert states == ["COMPLETED"] * 8, (states, sorted(runs.glob("slurm-*.out")))
    for (_, a), (_, b) in zip(jobs, jobs[1:]):
        assert rows[b][1] >= rows[a][2], (a, b, rows)  # b started after a ended
    ev = json.loads((runs / "eval.json").read_text())
    assert [t["k"] for t in ev["table"]] == [1, 2, 4] and "change" in ev["table"][0]  # RL against SFT on held-out tasks


def test_cluster_stops_by_pid_and_starts_again(cluster):
    pids = [int((SLURM_DIR / f).read_text()) for f in DAEMONS]
    r = sh("down")
    assert r.returncode == 0, r.stderr
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), pid
    assert not controller_up()
    one = c2("study", "submit", "kl_estimators", "--scale", "smoke", "--executor", "slurm")
    assert (
        one.returncode == 2
        and "no Slurm controller answers" in one.stderr
        and len(one.stderr.strip().splitlines()) == 1
    )
    t0 = time.time()
    r = sh("up")
    assert r.returncode == 0 and controller_up(), r.stdout + r.stderr
    print(f"restarted in {time.time() - t0:.1f}s")
