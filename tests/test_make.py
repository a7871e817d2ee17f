"""`make test-nb NB=...`: one notebook's tests with `make test`'s flags (tests/run_suite.py), its progress and a PASS or
FAIL line; an unknown notebook stops make with one line."""

import os, re, shutil, subprocess
from conftest import ROOT


def make(*args, env=None):
    e = {k: v for k, v in os.environ.items() if k not in ("NB", "MAKEFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=600, env={**e, **(env or {})}
    )


def test_one_notebook_with_the_suites_flags():
    # any extra flag of $C2_TEST_FLAGS is passed on, after the suite's own rule for bwrap; a heartbeat every 0.5 s here
    r = make("test-nb", "NB=nbs/00_core.ipynb", env={"C2_TEST_FLAGS": "slow", "C2_HEARTBEAT_S": "0.5"})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    bwrap = " bwrap" if shutil.which("bwrap") or os.environ.get("CI") == "true" else ""
    assert lines[0].startswith("nbs/00_core.ipynb: nbdev_test --path ") and lines[0].endswith(f"--flags slow{bwrap}")
    assert re.fullmatch(r"waiting for 00_core\.ipynb's tests: \d+s", lines[1]), lines
    assert re.fullmatch(r"PASS  notebook 00_core\.ipynb  \(\d+\.\ds\)", lines[-1]), lines
    # the name alone, and a unique prefix, name the same notebook
    for nb in ("00_core", "00"):
        assert make("test-nb", f"NB={nb}", "-n").returncode == 0


def test_unknown_notebook_is_one_line():
    for nb, expect in [
        ("31_modle", "test-nb: no notebook 31_modle in nbs/ (did you mean 31_model?)"),
        ("", "test-nb: say which notebook, e.g. make test-nb NB=31_model"),
    ]:
        r = make("test-nb", f"NB={nb}")
        out = (r.stdout + r.stderr).strip().splitlines()
        assert r.returncode == 2 and len(out) == 1 and expect in out[0], out
