"""c2bench with the real parts: the shipped v1 data, the real standard library and its test suite, the real
bubblewrap sandbox. Revalidation runs each task's test command twice (as given: must fail; with the reference
solution: must pass); the full run over every shipped task is the slow tier."""
import json, shutil, sys, time
from collections import Counter
import pytest
from composer2.mutations import CATEGORIES, mutation_sites
from composer2.c2bench import MODULES, build_c2bench, c2bench_manifest, c2bench_records, c2bench_stats, c2bench_suite, default_assets, diff_counts, revalidate, spread_sample, stdlib_dir, module_test_cmd
from composer2.config import C2Error
from composer2.tasks import Task

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
needs_testsuite = pytest.mark.skipif(not (stdlib_dir() / "test" / "support" / "__init__.py").is_file(),
                                     reason="the standard library's test suite is not installed")

@pytest.fixture(scope="module")
def suite():
    return c2bench_suite()

def test_shipped_suite(suite):
    man = c2bench_manifest()
    mods = Counter(t.meta["module"] for t in suite)
    assert len(suite) >= 200 and len(mods) >= 10, (len(suite), mods)
    assert man["counts"]["tasks"] == len(suite) and man["counts"]["modules"] == len(mods)
    assert set(man["modules"]) == set(mods) and set(mods) <= set(MODULES)
    assert man["python"]["version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    assert {t.meta["category"] for t in suite} == set(CATEGORIES)
    assert {t.split for t in suite} == {"train", "eval"}
    assert all(len({t.split for t in suite if t.meta["module"] == m}) == 1 for m in mods)    # splits share no module
    assert len({t.id for t in suite}) == len(suite)
    for t in suite:
        mod = t.meta["module"]
        assert isinstance(t, Task) and t.suite == "c2bench" and t.test_cmd == module_test_cmd(mod)
        assert set(t.solution) == {f"{mod}.py"} and {f"{mod}.py", f"test/test_{mod}.py", "test/support/__init__.py"} <= set(t.files)
        before, after = t.files[f"{mod}.py"], t.solution[f"{mod}.py"]
        assert before != after and diff_counts(before, after)["lines_changed"] == t.meta["lines_changed"] >= 1
        assert t.meta["mutation"]["before"] in after and 20 <= len(t.prompt) <= 400
    assert Task.from_json(suite[0].to_json()) == suite[0]

@needs_testsuite
def test_shipped_sources_are_this_stdlib():
    "The shipped originals are byte-identical to this interpreter's standard library (what the manifest says)."
    _, sources, man = c2bench_records()
    d = stdlib_dir()
    for rel, text in sources.items():
        assert (d / rel).read_text() == text, rel      # workspace paths mirror Lib/: MODULE.py, test/...

def test_corrupt_or_foreign_data_is_refused(tmp_path):
    root = tmp_path / "assets"
    shutil.copytree(default_assets() / "v1", root / "v1")
    assert len(c2bench_suite(root=root)) == c2bench_manifest()["counts"]["tasks"]
    man = json.loads((root / "v1/manifest.json").read_text())
    man["python"]["version"] = "3.99.0"
    (root / "v1/manifest.json").write_text(json.dumps(man))
    with pytest.raises(C2Error, match="validated with Python 3.99"): c2bench_suite(root=root)
    assert len(c2bench_suite(root=root, check_python=False)) == man["counts"]["tasks"]
    data = bytearray((root / "v1/tasks.jsonl.gz").read_bytes()); data[-5] ^= 1
    (root / "v1/tasks.jsonl.gz").write_bytes(bytes(data))
    with pytest.raises(C2Error, match="corrupt"): c2bench_suite(root=root, check_python=False)
    with pytest.raises(C2Error, match="no c2bench version 'v9'"): c2bench_suite("v9")
    with pytest.raises(C2Error, match="unknown c2bench category"): c2bench_suite(categories=["typo"])

@needs_testsuite
def test_mutation_sites_on_real_modules():
    for mod in ["fractions", "shlex", "optparse"]:
        text = (stdlib_dir() / f"{mod}.py").read_text()
        t0 = time.time()
        sites = mutation_sites(mod, text)
        assert time.time() - t0 < 20 and len(sites) > 100
        for m in sites[::7]:
            mutated = m.apply(text)
            assert m.revert(mutated) == text
            assert mutated[:m.start] == text[:m.start] and mutated[m.start + len(m.after):] == text[m.end:]
    assert {m.category for m in mutation_sites("fractions", (stdlib_dir() / "fractions.py").read_text())} == set(CATEGORIES)

@needs_bwrap
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
def test_generation_is_deterministic(tmp_path):
    "The same seed gives byte-identical files, and the shipped colorsys tasks are what this interpreter regenerates."
    man = c2bench_manifest()
    kw = dict(version="v1", modules=["colorsys"], seed=man["seed"], per_module=5, max_per_function=man["max_per_function"],
              workers=2, log=lambda s: None)
    a, b = build_c2bench(tmp_path / "a", **kw), build_c2bench(tmp_path / "b", **kw)
    assert a["files"] == b["files"] and a["counts"]["tasks"] == 5
    for f in ["tasks.jsonl.gz", "sources.json.gz"]:
        assert (tmp_path / "a/v1" / f).read_bytes() == (tmp_path / "b/v1" / f).read_bytes()
    rebuilt, _, _ = c2bench_records(root=tmp_path / "a")
    shipped = [r for r in c2bench_records()[0] if r["module"] == "colorsys"]
    assert rebuilt == shipped[:5]     # a module's tasks are its first killed candidates: a smaller quota is a prefix
    other = build_c2bench(tmp_path / "c", **{**kw, "seed": man["seed"] + 1})
    assert other["files"]["tasks.jsonl.gz"] != a["files"]["tasks.jsonl.gz"]

def test_stats(suite):
    st = c2bench_stats(suite)
    assert st["n_tasks"] == len(suite) and sum(st["by_category"].values()) == len(suite)
    assert st["prompt_chars"]["median"] <= 390 and st["lines_changed"]["median"] <= 10

@pytest.mark.slow
@needs_bwrap
def test_revalidate_all(suite):
    "Every shipped task, both ways, in the real sandbox."
    t0 = time.time()
    res = revalidate(suite, workers=2)
    print(f"revalidated all {len(suite)} tasks in {time.time() - t0:.1f}s")
    bad = [r for r in res if not r["ok"]]
    assert not bad, bad
