"""`make test`: the notebook-sync and format checks, then pytest over tests/ and nbdev_test over nbs/ side by side, one
summary line at the end.

Extra nbdev flags (e.g. slow, gpu) come from $C2_TEST_FLAGS; extra pytest arguments from $PYTEST_ADDOPTS. Cells that need
bubblewrap (`#| bwrap`) run where `bwrap` is installed, and always under CI=true, where a missing bubblewrap then fails
them instead of passing silently."""

import json, os, re, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
results = []  # (name, ok, seconds)


def run(cmd, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)


def record(name, ok, t0, detail=""):
    results.append((name, ok, time.time() - t0))
    print(f"{'PASS' if ok else 'FAIL'}  {name}  ({time.time() - t0:.1f}s)", flush=True)
    if not ok and detail:
        print(detail.rstrip()[-6000:], flush=True)


def git_dirty(path):
    return run(["git", "status", "--porcelain", "--", path]).stdout.strip()


def sync_checks():
    in_git = run(["git", "rev-parse", "--is-inside-work-tree"]).returncode == 0
    for name, cmd, path in [
        ("sync: nbdev_export leaves composer2/ unchanged", [str(BIN / "nbdev_export")], "composer2"),
        ("sync: nbdev_clean leaves nbs/ unchanged", [str(BIN / "nbdev_clean")], "nbs"),
    ]:
        t0 = time.time()
        if not in_git:
            record(name + " (no git checkout: cannot compare)", os.environ.get("CI") != "true", t0)
            continue
        before = git_dirty(path)
        r = run(cmd)
        after = git_dirty(path)
        ok = r.returncode == 0 and after == before == ""
        record(name, ok, t0, r.stdout + r.stderr + ("\nuncommitted or changed:\n" + after if after else ""))


FORMATTED = ["nbs", "tests", "kernels", "studies/*.ipynb", "tools"]  # composer2/ is exported from nbs/


def format_check():
    "ruff format --check over the notebooks and scripts (120-character lines, one statement per line)."
    t0 = time.time()
    paths = [str(p) for pat in FORMATTED for p in sorted(ROOT.glob(pat))]
    r = run([str(BIN / "ruff"), "format", "--check", "--no-cache", *paths])
    record("format: ruff format --check (make format fixes it)", r.returncode == 0, t0, r.stdout + r.stderr)


def nb_flags() -> list[str]:
    "The nbdev flags whose cells run: $C2_TEST_FLAGS, and `bwrap` where bubblewrap is installed or CI=true."
    flags = os.environ.get("C2_TEST_FLAGS", "").split()
    if shutil.which("bwrap") or os.environ.get("CI") == "true":
        flags.append("bwrap")
    return flags


def notebook(nb):
    "One notebook through `nbdev_test` (what `make test-nb` runs): (name, ok, started, output, seconds)."
    t0 = time.time()
    cmd = [str(BIN / "nbdev_test"), "--path", str(nb), "--n_workers", "0", "--do_print"]
    flags = nb_flags()
    if flags:
        cmd += ["--flags", " ".join(flags)]
    r = run(cmd)
    return f"notebook {nb.name}", r.returncode == 0, t0, r.stdout + r.stderr, time.time() - t0


def notebooks(nbs):
    """Every notebook's tests, one after another in one child process (nbdev's `test_nb`, which `nbdev_test` runs for
    each notebook, each in a fresh IPython namespace): torch and the library are imported once, not once per notebook.
    A list of (name, ok, started, output, seconds); a notebook the worker never reported (it died) fails."""
    t0 = time.time()
    out = ROOT / ".notebooks-report.jsonl"
    out.unlink(missing_ok=True)
    r = run([sys.executable, __file__, "--notebooks", str(out), " ".join(nb_flags()), *map(str, nbs)])
    got = {d["nb"]: d for d in map(json.loads, out.read_text().splitlines())} if out.exists() else {}
    out.unlink(missing_ok=True)
    died = f"the notebook worker stopped (exit {r.returncode}) before this notebook:\n{r.stdout}{r.stderr}"
    return [
        (f"notebook {nb.name}", d["ok"], t0, d["out"], d["secs"])
        if (d := got.get(str(nb)))
        else (f"notebook {nb.name}", False, t0, died, 0.0)
        for nb in nbs
    ]


def notebook_worker(report: str, flags: str, paths: list[str]):
    "The child of `notebooks`: each notebook's result as a JSON line of `report` (its stdout belongs to the cells)."
    import contextlib, io
    from nbdev.config import get_config
    from nbdev.test import test_nb

    skip = sorted(set(get_config().tst_flags.split()) - set(flags.split()))
    for p in paths:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            ok, secs = test_nb(Path(p), skip_flags=skip)
        with open(report, "a") as f:
            f.write(json.dumps(dict(nb=p, ok=bool(ok), secs=secs, out=err.getvalue()[-6000:])) + "\n")


def pytest_cmd(junit):
    return [
        sys.executable,
        "-m",
        "pytest",
        "tests",
        "-q",
        "-p",
        "no:cacheprovider",
        "--durations=15",
        f"--junitxml={junit}",
    ]


def main():
    start = time.time()
    sync_checks()
    format_check()
    # pytest and the notebooks side by side: pytest's waits (Ray and Slurm starting, jobs queued, subprocesses
    # importing) leave a core idle much of the time, and the notebooks fill it. pytest prints as it goes; the notebooks'
    # lines come as a block once they are all done (their output would cut pytest's progress line)
    junit = ROOT / ".pytest-report.xml"
    tests = subprocess.Popen(pytest_cmd(junit), cwd=ROOT)
    done = notebooks(sorted((ROOT / "nbs").glob("*.ipynb")))  # one at a time: pytest holds the other core
    nb_s = time.time() - start
    rc = tests.wait()
    print(f"\nnotebooks (alongside pytest, {nb_s:.0f}s):", flush=True)
    for name, ok, t0, out, secs in done:
        results.append((name, ok, secs))
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({secs:.1f}s)", flush=True)
        if not ok:
            print(out.rstrip()[-6000:], flush=True)
    n_pass = n_fail = n_skip = 0
    if junit.exists():
        xml = junit.read_text()
        m = re.search(r'<testsuite [^>]*?errors="(\d+)" failures="(\d+)" skipped="(\d+)" tests="(\d+)"', xml)
        if m:
            err, fail, skip, tests_n = map(int, m.groups())
            n_fail, n_skip, n_pass = err + fail, skip, tests_n - err - fail - skip
        junit.unlink()
    if rc not in (0, 5) and n_fail == 0:
        n_fail = 1  # pytest itself broke (collection, usage)
    passed = sum(ok for _, ok, _ in results) + n_pass
    failed = sum(not ok for _, ok, _ in results) + n_fail
    print(
        f"\nnotebooks and checks: {sum(ok for _, ok, _ in results)}/{len(results)} passed; pytest: {n_pass} passed, "
        f"{n_fail} failed, {n_skip} skipped; {time.time() - start:.0f}s in all"
    )
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--notebooks"]:
        notebook_worker(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
