"""Shared pytest setup. Under CI (CI=true) a skipped test is a failure: a real part that is missing there
(Slurm, bubblewrap, ...) must be installed by the project's own setup, not silently skipped.

Three opt-in tiers beside the quick one `make test` runs: `e2e` (end-to-end runs that go again through machinery the
quick tier exercises once -- every RL study at smoke scale, crash-and-resume chains, multi-rank and Slurm pipelines;
run by CI, `make test-e2e` or `--rune2e`), `slow` and `gpu` (on request: `--runslow`, `--rungpu`)."""

import os, re, subprocess, sys, tempfile
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
C2 = str(Path(sys.executable).parent / "c2")
IN_CI = os.environ.get("CI") == "true"
# the studies' run cache (stages, RL runs) of this test session: never the checkout's runs/, never reused across sessions
RUNS = tempfile.mkdtemp(prefix="c2-test-runs-")


def pytest_addoption(parser):
    parser.addoption("--rune2e", action="store_true", help="also run tests marked e2e (always under CI=true)")
    parser.addoption("--runslow", action="store_true", help="also run tests marked slow")
    parser.addoption("--rungpu", action="store_true", help="also run tests marked gpu")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in ("e2e", "slow", "gpu"):
            if mark in item.keywords and not (config.getoption(f"--run{mark}") or mark == "e2e" and IN_CI):
                # opt-in tests are deselected, not skipped: CI decides which tiers it runs
                item.add_marker(pytest.mark.skip(reason=f"{mark}: run with --run{mark}"))
                item.user_properties.append(("optin", mark))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if IN_CI and rep.skipped and not any(k == "optin" for k, _ in item.user_properties):
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true, which must run it: {rep.longrepr}"


def c2(*args, env=None, timeout=600):
    "Run the real `c2` console script; return the CompletedProcess."
    e = dict(os.environ, **{"C2_RUNS": RUNS, **(env or {})})
    return subprocess.run([C2, *args], capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)


def one_line_error(r, *fragments):
    "Assert a user mistake's outcome: exit status 2 and one line `c2: error: ...` holding every fragment."
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    # a run that fails part way has already drawn its progress bar ("rl async:  25%|...") or a heartbeat of a silent wait
    # ("waiting for rl async: Ray to start: 10s"): every other line is the error
    progress = r"^[^|]*\d+%\||^waiting for .*: \d+s$"
    lines = [l for l in r.stderr.strip().splitlines() if l.strip() and not re.match(progress, l)]
    assert len(lines) == 1 and lines[0].startswith("c2: error: ") and "Traceback" not in r.stderr, r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


@pytest.fixture(scope="session")
def smoke_data(tmp_path_factory):
    "A smoke-scale data dir built once by the real CLI."
    d = tmp_path_factory.mktemp("data")
    r = c2("data", "build", "--scale", "smoke", f"data.dir={d}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "" not in r.stdout.strip().splitlines()  # its summary, no stray blank lines
    return d
