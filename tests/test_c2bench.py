"""c2bench in the real bubblewrap sandbox, with the real standard library and its test suite: revalidation runs each
task's test command twice (as given: must fail; with the reference solution: must pass), on a sample and (slow) on
every shipped task, and a rebuild from the same seed gives the shipped tasks byte for byte. The shipped data, the
mutations and the statistics are unit-tested in nbs/25_mutations and 26_c2bench."""

import shutil, time
import pytest
from composer2.tasks.c2bench import (
    build_c2bench,
    c2bench_manifest,
    c2bench_records,
    c2bench_suite,
    revalidate,
    spread_sample,
)
from composer2.data.corpus import stdlib_dir

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
)
needs_testsuite = pytest.mark.skipif(
    not (stdlib_dir() / "test" / "support" / "__init__.py").is_file(),
    reason="the standard library's test suite is not installed",
)


@pytest.fixture(scope="module")
def suite():
    return c2bench_suite()


@needs_bwrap
@pytest.mark.e2e  # 53_c2bench revalidates 12 tasks in the quick tier
def test_revalidate_sample(suite):
    "20 tasks spread over the modules: in the real sandbox each fails as given and passes with its solution."
    sample = spread_sample(suite, 20)
    assert len({t.meta["module"] for t in sample}) == 20
    t0 = time.time()
    res = revalidate(sample, workers=2)
    took = time.time() - t0
    print(f"revalidated {len(sample)} tasks in {took:.1f}s")
    assert [r["id"] for r in res] == [t.id for t in sample]
    assert all(r["mutated_fails"] and r["solution_passes"] for r in res), [r for r in res if not r["ok"]]
    assert took < 60


@needs_bwrap
@needs_testsuite
@pytest.mark.e2e  # 53_c2bench builds twice and compares in the quick tier
def test_generation_is_deterministic(tmp_path):
    "The same seed gives byte-identical files, and the shipped colorsys tasks are what this interpreter regenerates."
    man = c2bench_manifest()
    kw = dict(
        version="v1",
        modules=["colorsys"],
        seed=man["seed"],
        per_module=5,
        max_per_function=man["max_per_function"],
        workers=2,
        log=lambda s: None,
    )
    a, b = build_c2bench(tmp_path / "a", **kw), build_c2bench(tmp_path / "b", **kw)
    assert a["files"] == b["files"] and a["counts"]["tasks"] == 5
    for f in ["tasks.jsonl.gz", "sources.json.gz"]:
        assert (tmp_path / "a/v1" / f).read_bytes() == (tmp_path / "b/v1" / f).read_bytes()
    rebuilt, _, _ = c2bench_records(root=tmp_path / "a")
    shipped = [r for r in c2bench_records()[0] if r["module"] == "colorsys"]
    assert rebuilt == shipped[:5]  # a module's tasks are its first killed candidates: a smaller quota is a prefix
    other = build_c2bench(tmp_path / "c", **{**kw, "seed": man["seed"] + 1})
    assert other["files"]["tasks.jsonl.gz"] != a["files"]["tasks.jsonl.gz"]


@pytest.mark.slow
@needs_bwrap
def test_revalidate_all(suite):
    "Every shipped task, both ways, in the real sandbox."
    t0 = time.time()
    res = revalidate(suite, workers=2)
    print(f"revalidated all {len(suite)} tasks in {time.time() - t0:.1f}s")
    bad = [r for r in res if not r["ok"]]
    assert not bad, bad


# c2bench v2: the same checks, and the oracle through the tools and the judge


@pytest.fixture(scope="module")
def suite_v2():
    return c2bench_suite(version="v2")


@needs_bwrap
@pytest.mark.e2e  # 55_c2bench_v2 revalidates 10 tasks in the quick tier
def test_revalidate_sample_v2(suite_v2):
    "15 v2 tasks spread over the units: each fails as given and passes with its solution."
    res = revalidate(spread_sample(suite_v2, 15), workers=2, timeout=300.0)
    assert all(r["mutated_fails"] and r["solution_passes"] for r in res), [r for r in res if not r["ok"]]


@needs_bwrap
@needs_testsuite
@pytest.mark.e2e  # 55_c2bench_v2 builds twice and compares in the quick tier
def test_generation_is_deterministic_v2(tmp_path):
    "The same seed gives byte-identical v2 files, and the shipped tasks of two units are what this interpreter regenerates."
    from composer2.tasks.c2bench_v2 import build_c2bench_v2

    kw = dict(units=["colorsys", "tomllib"], seed=c2bench_manifest("v2")["seed"], workers=2, log=lambda s: None)
    a, b = build_c2bench_v2(tmp_path / "a", **kw), build_c2bench_v2(tmp_path / "b", **kw)
    assert a["files"] == b["files"]
    rebuilt = c2bench_records("v2", root=tmp_path / "a")[0]
    assert rebuilt == [r for r in c2bench_records("v2")[0] if r["module"] in ("colorsys", "tomllib")]


def _oracle(tasks):
    from composer2.config import load_config
    from composer2.agent.episode import run_episodes
    from composer2.agent.policies import OraclePolicy

    cfg = load_config("smoke", overrides=["tasks.suite=c2bench", "sandbox.timeout=300", "tasks.episode_timeout_s=1200"])
    return run_episodes(tasks, lambda t: OraclePolicy(), cfg, workers=2)


@needs_bwrap
def test_oracle_solves_v2_sample(suite_v2):
    "The oracle, through the tools and the judge, solves v2 tasks of several files and hundreds of lines."
    multi = sorted((t for t in suite_v2 if t.meta["files_changed"] > 1), key=lambda t: -t.meta["lines_changed"])[:2]
    eps = _oracle(multi + spread_sample(suite_v2, 4))
    assert all(e.solved for e in eps), [(e.task.id, e.stop_reason, e.test_output[-300:]) for e in eps if not e.solved]


@pytest.mark.slow
@needs_bwrap
def test_v2_all(suite_v2):
    "Every shipped v2 task, both ways in the sandbox, and solved by the oracle."
    bad = [r for r in revalidate(suite_v2, workers=2, timeout=300.0) if not r["ok"]]
    assert not bad, bad
    eps = _oracle(suite_v2)
    assert all(e.solved for e in eps), [e.task.id for e in eps if not e.solved]


def test_suite_never_reads_the_machines_sources(monkeypatch, tmp_path):
    """Where this machine's standard library differs from the one the data was built with (here: none at all), both
    versions load the same tasks, from the shipped records and sources; only a rebuild needs the machine's files."""
    import composer2.tasks.c2bench as c1, composer2.tasks.c2bench_v2 as c2, composer2.data.corpus as d
    from composer2.core import C2Error

    want = {v: [(t.id, t.files, t.solution, t.prompt) for t in c2bench_suite(v)] for v in ("v1", "v2")}
    for mod in (c1, c2, d):
        monkeypatch.setattr(mod, "stdlib_dir", lambda: tmp_path / "no-stdlib")
    for v in ("v1", "v2"):
        assert [(t.id, t.files, t.solution, t.prompt) for t in c2bench_suite(v)] == want[v]
    with pytest.raises(C2Error, match="test suite is not installed"):
        c1.stdlib_sources(["colorsys"])
