"""Training provenance through the real `c2 pretrain`: a cached stage records the code it was trained at; after a model
line is edited (a copy of the package with one line changed, run through PYTHONPATH) the stage is trained again rather
than reused, `--reuse-stale` reuses it and says so, and a result whose training came from the other code is stale in
the results index (`composer2.runs.open_run`, `stale_training`, `code_label`)."""

import json, os, shutil, subprocess, sys
import pytest
from conftest import ROOT, RUNS, c2
from composer2.studies.runner import build_index
from composer2.runs import stale_training
from composer2.runs import code_digest


def stage(runs, data):
    "The smallest cached stage: base at smoke scale, two steps."
    return [
        "pretrain",
        "--stage",
        "base",
        "--scale",
        "smoke",
        f"data.dir={data}",
        f"pretrain.runs={runs}",
        "pretrain.base_steps=2",
        "train.eval_every=2",
        "train.eval_tokens=256",
        "train.batch_size=4",
    ]


def edited_checkout(tmp_path):
    "A copy of the package (and the scales it reads) with one line of the model edited: other code."
    root = tmp_path / "edited"
    shutil.copytree(ROOT / "composer2", root / "composer2", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "nbs" / "scales", root / "nbs" / "scales")
    model = root / "composer2" / "model" / "moe.py"
    model.write_text(model.read_text().replace("\n", "\n# an edited model line\n", 1))
    return root


def run_edited(root, *args):
    "`c2 ARGS` or `python -c CODE` with the edited package first on the path."
    env = dict(os.environ, PYTHONPATH=str(root), C2_RUNS=RUNS)
    env.pop("C2_REUSE_STALE", None)
    code = args[1] if args[0] == "-c" else "import sys\nfrom composer2.cli import main\nsys.exit(main())"
    argv = [sys.executable, "-c", code, *args[2:]] if args[0] == "-c" else [sys.executable, "-c", code, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=root)


INDEX = """
import sys
from pathlib import Path
from composer2.studies.runner import build_index
print(build_index(Path(sys.argv[1])).read_text())
"""


@pytest.mark.e2e  # 03_runs checks the records and their reading in process; this trains at two codes
def test_edited_code_retrains_and_marks_results_stale(smoke_data, tmp_path):
    runs, base = tmp_path / "runs", tmp_path / "runs" / "smoke" / "base"
    r = c2(*stage(runs, smoke_data), env={"C2_REUSE_STALE": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    first = json.loads((base / "provenance.json").read_text())
    assert first["code_digest"] == code_digest() and first["cpu"] and first["torch"] and first["time"]
    assert set(first["cpu_flags"]) <= {"avx2", "avx512f"} and "commit" in first and "dirty" in first
    # (at the same code a rerun finds it done: tests/test_pretrain.py)

    root = edited_checkout(tmp_path)
    edited = code_digest(root / "composer2")
    assert edited != first["code_digest"]
    r = run_edited(root, *stage(runs, smoke_data))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "already complete" not in r.stdout and "internal-codebase NLL" in r.stdout  # trained again, not reused
    assert f"trained at commit {first['commit']}, code digest {first['code_digest']}" in r.stderr, r.stderr[-3000:]
    second = json.loads((base / "provenance.json").read_text())
    assert second["code_digest"] == edited and (base / "done.json").exists()
    assert (
        json.loads((base.parent / ".stale" / f"base@{first['code_digest']}" / "provenance.json").read_text()) == first
    )

    # a result whose training was done at the first code: current there, stale at the edited code
    results = tmp_path / "results"
    res = {"study": "cpt_loss", "scale": "smoke", "status": "ok", "claims": [], "training": [{"run": "r", **first}]}
    (results / "cpt_loss" / "smoke").mkdir(parents=True)
    (results / "cpt_loss" / "smoke" / "results.json").write_text(json.dumps(res))
    assert (
        stale_training(res) == []
        and "| smoke | no verdicts recorded | 0 of 0 | unknown |" in build_index(results).read_text()
    )
    r = run_edited(root, "-c", INDEX, str(results))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| smoke | no verdicts recorded | 0 of 0 | unknown (stale, trained at other code: 1 run) |" in r.stdout, (
        r.stdout
    )

    # back at the first code: the stage was trained at the edited code, and is reused only on request, saying so
    r = c2(*stage(runs, smoke_data), "--reuse-stale")
    assert r.returncode == 0 and "already complete" in r.stdout, r.stderr[-3000:]
    assert f"reusing {base}, trained at commit None, code digest {edited}" in r.stderr, r.stderr[-3000:]
    assert json.loads((base / "provenance.json").read_text()) == second
