"""The `c2` console script end to end, as a user runs it: a fresh data dir to a trained model generating text, saying
what it does and nothing else (no library's notices), and one-line errors (exit status 2) for user mistakes."""

import json, re, shutil
import pytest
from conftest import c2, one_line_error
from composer2.pretrain.stages import read_losses


def test_help_lists_subcommands():
    r = c2("--help")
    assert r.returncode == 0
    for sub in ["info", "config", "data", "train", "generate", "reproduce", "study"]:
        assert sub in r.stdout


def test_info_reports_versions_and_real_parts():
    r = c2("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["torch"].startswith("2.13") and info["python"].startswith("3.")
    for key in ["device", "data_dir", "slurm", "bubblewrap", "gpu"]:
        assert info[key]
    assert "torch" in c2("info").stdout


@pytest.mark.parametrize(
    "override,fragments",
    [
        ("model.bogus=1", ["unknown key model.bogus", "allowed in model"]),
        ("model.d_model=wide", ["model.d_model: 'wide' is not an integer (e.g. model.d_model="]),
        ("model=3", ["model is a section of the config, not a value", "model.vocab_size="]),
        ("model.gate=relu", ["model.gate", "softmax, sigmoid"]),
        ("train.lr=-1", ["train.lr", "out of range"]),
        ("model.n_heads=5", ["model.n_heads", "multiple of model.n_kv_heads"]),
        ("nokey", ["key=value"]),
    ],
)
def test_bad_config_is_one_line(override, fragments):
    one_line_error(c2("config", "--scale", "smoke", override), *fragments)
    assert "ModelConfig" not in c2("config", "--scale", "smoke", override).stderr  # no class names of ours


def test_unknown_scale_and_missing_file():
    one_line_error(c2("config", "--scale", "enormous"), "unknown scale 'enormous'", "smoke")
    one_line_error(c2("config", "--config", "/no/such.yaml"), "config file not found")


def test_missing_data_dir(tmp_path):
    one_line_error(c2("train", "--scale", "smoke", f"data.dir={tmp_path / 'empty'}"), "no built data", "c2 data build")


def test_missing_package_in_corpus(tmp_path):
    one_line_error(
        c2("data", "build", "--scale", "smoke", f"data.dir={tmp_path}", "data.packages=[no_such_pkg_xyz]"),
        "no_such_pkg_xyz",
    )


def test_unreadable_tokenizer(smoke_data, tmp_path):
    broken = tmp_path / "data"
    shutil.copytree(smoke_data, broken)
    (tok,) = broken.glob("*/tokenizer.json")
    tok.write_text("{ this is not a tokenizer")
    one_line_error(c2("train", "--scale", "smoke", f"data.dir={broken}"), "tokenizer", str(tok))


@pytest.mark.e2e  # 70_pretrain runs a budget-cut `train` in process; here, the line the CLI prints
def test_a_time_budget_that_cuts_training_short_says_so(smoke_data, tmp_path):
    r = c2(
        "train",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        "train.steps=100000",
        "train.minutes=0.02",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    m = re.search(r"stopped early: the train.minutes=0.02 budget ended the run after (\d+) of 100000 steps", r.stdout)
    assert m and 0 < int(m.group(1)) < 100000, r.stdout


# the notices libraries print on every run, silenced at their source: Lightning's tips and accelerator lines, its srun
# hint, torch.load's weights_only note, a pytree deprecation, torchao's CUDA extensions a CPU torch cannot load, and
# Lightning's `Epoch 0/-2` bar; the first commands a newcomer runs say what they do and nothing else
NOISE = [
    "💡 Tip",
    "litlogger",
    "GPU available",
    "TPU available",
    "The `srun` command is available",
    "`weights_only` was not set",
    "LeafSpec",
    "Failed to load",
    "is an Enum subclass",
    "Epoch 0/",
    "`Trainer.fit` stopped",
]


def assert_quiet(r):
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    heard = [n for n in NOISE if n in out]
    assert not heard, (heard, out[-3000:])


@pytest.fixture(scope="module")
def trained(smoke_data, tmp_path_factory):
    """A smoke model trained 40 steps by the real CLI, with Lightning's checkpoint saves (where weights_only was noted)
    and validations, and the heartbeat of its final evaluation at 1 s: (its run dir, c2 train's result)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    argv = ["train", "--scale", "smoke", f"data.dir={smoke_data}", "train.steps=40", "train.eval_every=20"]
    return run, c2(*argv, "pretrain.ckpt_every=20", "--out", str(run), env={"C2_HEARTBEAT_S": "1", "COLUMNS": "200"})


def test_fresh_data_to_trained_model_generating(smoke_data, trained, tmp_path):
    run, r = trained
    assert_quiet(r)
    assert "stage train" in r.stdout and "trained 40 steps" in r.stdout  # the bar names the stage
    exported = c2(
        "export",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        "--checkpoint",
        str(run / "final.pt"),
        "--out",
        str(tmp_path / "hf"),
    )
    assert_quiet(exported)
    before, after = map(float, re.search(r"internal-codebase NLL: ([\d.]+) -> ([\d.]+)", r.stdout).groups())
    assert after < before - 0.5, r.stdout
    ck = run / "final.pt"
    assert ck.is_file() and len(read_losses(run)) == 40 and "stopped early" not in r.stdout
    assert (
        "already trained"
        in c2("train", "--scale", "smoke", f"data.dir={smoke_data}", "train.steps=40", "--out", str(run)).stdout
    )
    for spec in ["false", "true"]:
        g = c2(
            "generate",
            "--scale",
            "smoke",
            f"data.dir={smoke_data}",
            "--checkpoint",
            str(ck),
            "--prompt",
            "def ",
            "-n",
            "2",
            "sample.max_new_tokens=12",
            f"sample.speculative={spec}",
        )
        assert g.returncode == 0, g.stderr
        assert g.stdout.count("def ") >= 2 and len(g.stdout) > 20
    one_line_error(
        c2("generate", "--scale", "smoke", f"data.dir={smoke_data}", "--checkpoint", str(tmp_path / "nope.pt")),
        "checkpoint not found",
    )
    # the trained policy through the agent harness on held-out tasks, against itself: both evaluations draw from the same
    # sampling streams, so the paired change is exactly 0 at every K
    ev = ["tasks", "eval", "--scale", "smoke", f"data.dir={smoke_data}", "--checkpoint", str(ck), "-n", "3", "-k", "2"]
    e = c2(*ev, "--against", str(ck), "--json", "--out", str(tmp_path / "eval.json"))
    assert e.returncode == 0, e.stderr
    tab = json.loads(e.stdout)
    assert [r["k"] for r in tab] == [1, 2] and all(r["change"] == r["change_lo"] == r["change_hi"] == 0 for r in tab)
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert saved["table"] == tab and [len(r["solved"]) for r in saved["results"][str(ck)]] == [2, 2, 2]
    one_line_error(c2(*ev[:-2], "-k", "0"), "need at least one sample per task")


def test_study_list_names_every_study_in_aligned_columns():
    from composer2.studies.registry import STUDIES

    r = c2("study", "list")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and [l.split()[0] for l in lines] == list(STUDIES)
    assert len({l.index("scales:") for l in lines}) == 1, r.stdout  # one column, however long "Figure 2 (right)" is


HF_CHECK = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
m, t = AutoModelForCausalLM.from_pretrained(sys.argv[1]), AutoTokenizer.from_pretrained(sys.argv[1])
text = t.apply_chat_template([dict(role="user", content="Fix add() in m.py")], add_generation_prompt=True, tokenize=False)
x = torch.tensor([t(text, add_special_tokens=False)["input_ids"]])
out = m.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=12, min_new_tokens=12, do_sample=False)
with torch.no_grad(): last = m(x).logits[0, -1]
print(json.dumps(dict(prompt=x[0].tolist(), tokens=out[0, x.shape[1]:].tolist(), logits=last.tolist(), cls=type(m).__name__)))
"""


@pytest.mark.e2e
def test_export_to_hugging_face_and_import_back(smoke_data, trained, tmp_path):
    "c2 export -> transformers alone (a fresh process, offline) equals our engine, in the harness too; c2 import -> the same bits."
    import os, subprocess, sys, torch
    from composer2.model.engine import Engine
    from composer2.model.checkpoint import load_checkpoint

    ck, hf = trained[0] / "final.pt", tmp_path / "hf"
    r = c2("export", "--scale", "smoke", f"data.dir={smoke_data}", "--checkpoint", str(ck), "--out", str(hf))
    assert r.returncode == 0, r.stderr
    assert (
        "Ernie4_5_MoeForCausalLM" in r.stdout
        and (hf / "model.safetensors").is_file()
        and (hf / "tokenizer.json").is_file()
    )
    p = subprocess.run(
        [sys.executable, "-c", HF_CHECK, str(hf)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.splitlines()[-1])
    model, _ = load_checkpoint(ck)
    with torch.no_grad():
        ours = model(torch.tensor([res["prompt"]])).logits[0, -1]
    assert res["cls"] == "Ernie4_5_MoeForCausalLM" and (ours - torch.tensor(res["logits"])).abs().max() < 1e-4
    gens, _ = Engine(model).generate([res["prompt"]], max_new_tokens=12, temperature=0.0, stop_ids=())
    assert gens[0].tokens == res["tokens"]  # greedy generate() == our engine's greedy tokens
    # the exported directory as a policy in the harness (transformers' generate() behind our EnginePolicy), against the
    # checkpoint through our engine, greedy: the same episodes
    e = c2(
        "tasks",
        "eval",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        "--policy",
        f"hf:{hf}",
        "--against",
        str(ck),
        "-n",
        "2",
        "-k",
        "1",
        "rl.temperature=0",
        "--json",
        "--out",
        str(tmp_path / "ev.json"),
    )
    assert e.returncode == 0, e.stderr
    runs = json.loads((tmp_path / "ev.json").read_text())["results"]
    assert runs[f"hf:{hf}"] == runs[str(ck)] and sum(t["tokens"] for t in runs[str(ck)]) > 0
    r = c2("import", "--scale", "smoke", "--hf", str(hf), "--out", str(tmp_path / "back.pt"))
    assert r.returncode == 0, r.stderr
    back, _ = load_checkpoint(tmp_path / "back.pt")
    assert back.cfg == model.cfg
    assert all(torch.equal(back.state_dict()[n], t) for n, t in model.state_dict().items() if not n.endswith(".load"))
    one_line_error(
        c2("export", "--scale", "smoke", f"data.dir={smoke_data}", "--checkpoint", str(ck), "--out", str(hf)),
        "exists and is not empty",
    )
    one_line_error(
        c2("import", "--scale", "smoke", "--hf", str(tmp_path), "--out", str(tmp_path / "x.pt")),
        "is not a Hugging Face model directory",
    )
