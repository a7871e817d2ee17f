"""Staged pretraining through the real `c2 pretrain` command: exact resume after SIGKILL and after a SIGUSR2
preemption, and one-line errors for a missing predecessor, another data dir and a corrupted checkpoint."""

import json, signal, subprocess, time
import pytest, torch
from conftest import C2, ROOT, c2, one_line_error
from composer2.pretrain.stages import read_losses
from composer2.runs import open_run

STEPS = 24


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
        "train.eval_every=8",
        "train.eval_tokens=1024",
        *extra,
    ]


@pytest.fixture(scope="module")
def reference(smoke_data, tmp_path_factory):
    runs = tmp_path_factory.mktemp("ref")
    r = c2(*args(runs, smoke_data))
    assert r.returncode == 0, r.stderr[-3000:]
    losses = read_losses(runs / "smoke" / "base")
    assert sorted(losses) == list(range(1, STEPS + 1))
    return losses


def run_until(cmd_args, min_steps, sig, runs):
    "Start c2, wait until it has logged `min_steps` steps, then send `sig`; return the exit code."
    p = subprocess.Popen([C2, *cmd_args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = runs / "smoke" / "base" / "losses.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and p.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= min_steps:
            break
        time.sleep(0.05)
    assert p.poll() is None, f"finished before the signal: {p.stderr.read()[-2000:]}"
    p.send_signal(sig)
    err = p.communicate(timeout=300)[1]
    return p.returncode, err


@pytest.mark.e2e  # 70_pretrain's resume cells check the same bit for bit in process
def test_sigkill_then_rerun_is_bitwise_identical(smoke_data, tmp_path, reference):
    code, _ = run_until(args(tmp_path, smoke_data), 10, signal.SIGKILL, tmp_path)
    assert code == -signal.SIGKILL
    out = tmp_path / "smoke" / "base"
    assert not (out / "done.json").exists() and (out / "last.ckpt").exists()
    step = torch.load(out / "last.ckpt", weights_only=False)[
        "global_step"
    ]  # whole: a kill mid-write leaves at most a temporary
    r = c2(*args(tmp_path, smoke_data))
    assert r.returncode == 0, r.stderr[-3000:]
    assert not list(out.glob("*.tmp"))  # the rerun removed any temporary the killed writer left
    done = json.loads((out / "done.json").read_text())
    assert done["resumed_from"] == step >= 8 and done["steps"] == STEPS
    assert done["initial_internal_nll"] > done["internal_nll"]  # measured before step 0, kept across the kill
    assert read_losses(out) == reference  # every step's loss, bit for bit


@pytest.mark.e2e
def test_sigusr2_preemption_checkpoints_then_resumes(smoke_data, tmp_path, reference):
    code, err = run_until(args(tmp_path, smoke_data), 6, signal.SIGUSR2, tmp_path)
    assert code == 75 and "preempted at step" in err and "rerun the same command" in err, err[-2000:]
    out = tmp_path / "smoke" / "base"
    step = torch.load(out / "last.ckpt", weights_only=False)["global_step"]
    assert step >= 6
    r = c2(*args(tmp_path, smoke_data))
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "done.json").read_text())["resumed_from"] == step
    assert read_losses(out) == reference


def test_missing_predecessor_is_one_line(smoke_data, tmp_path):
    r = c2(
        "pretrain",
        "--stage",
        "cpt",
        "--level",
        "small",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        f"pretrain.runs={tmp_path}",
    )
    one_line_error(r, "run `c2 pretrain --scale smoke --stage base` first")


@pytest.mark.e2e  # read_torch's refusals are checked in process by 33_checkpoint; here, as the CLI says them
def test_bad_checkpoints_are_one_line(smoke_data, tmp_path):
    base = tmp_path / "smoke" / "base"
    base.mkdir(parents=True, exist_ok=True)
    (base / "final.pt").write_bytes(b"\0garbage")
    r = c2(
        "pretrain",
        "--stage",
        "cpt",
        "--level",
        "small",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        f"pretrain.runs={tmp_path}",
    )
    one_line_error(r, "final.pt is unreadable")
    cpt = tmp_path / "smoke" / "cpt-small"
    open_run(cpt)  # a run started at the code now (one with no record would be trained again)
    (cpt / "last.ckpt").write_bytes(b"\0garbage")
    r = c2(
        "pretrain",
        "--stage",
        "cpt",
        "--level",
        "small",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        f"pretrain.runs={tmp_path}",
    )
    one_line_error(r, "last.ckpt is unreadable", "delete it to restart the stage")


def test_checkpoint_from_other_data_is_refused(smoke_data, tmp_path):
    from composer2.config import load_config
    from composer2.model.checkpoint import save_checkpoint
    from composer2.model.moe import MoETransformer

    cfg = load_config("smoke", overrides=["model.vocab_size=1024"])
    base = tmp_path / "smoke" / "base"
    save_checkpoint(base / "final.pt", MoETransformer(cfg.model), cfg, data_key="0123456789abcdef")
    r = c2(
        "pretrain",
        "--stage",
        "cpt",
        "--level",
        "small",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        f"pretrain.runs={tmp_path}",
    )
    one_line_error(r, "0123456789abcdef", "another tokenizer")


@pytest.mark.e2e
def test_every_stage_through_the_cli(smoke_data, tmp_path):
    common = [
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        f"pretrain.runs={tmp_path}",
        "pretrain.base_steps=4",
        "pretrain.cpt_steps=1",
        "pretrain.mtp_steps=2",
        "pretrain.long_steps=2",
        "pretrain.sft_steps=2",
        "train.eval_every=2",
        "train.eval_tokens=256",
        "train.batch_size=4",
    ]
    for stage in [["base"], ["cpt", "--level", "all"], ["mtp"], ["long"], ["sft"]]:
        r = c2("pretrain", "--stage", *stage, *common)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "internal-codebase NLL" in r.stdout
    done = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "smoke").glob("*/done.json")}
    assert set(done) == {"base", "cpt-small", "cpt-medium", "cpt-large", "mtp", "long", "sft"}
    assert [done[f"cpt-{lv}"]["steps"] for lv in ("small", "medium", "large")] == [1, 3, 10]
    assert done["long"]["tokens"] == 2 * 1 * 16 * 64 and done["sft"]["mtp_agreement"] is not None  # seq x16, batch /16
    assert "already complete" in c2("pretrain", "--stage", "base", *common).stdout


def test_smoke_prompts_fit_their_windows(smoke_data):
    """At smoke scale the rendered first turn (system prompt + task, ~255 tokens of the 1024-token smoke vocabulary) fits
    the rollout context and the SFT window, and every SFT transcript fits its window whole: with the window at 256 (the
    long-context factor 4 of the larger scales) each lost its prompt, the stream keeping a transcript's end."""
    from composer2.agent.protocol import Transcript, make_system_prompt
    from composer2.config import load_config, rl_context
    from composer2.data.corpus import open_data
    from composer2.pretrain.stages import sft_examples, stage_plan
    from composer2.tasks.suites import load_suite

    cfg = load_config("smoke", overrides=[f"data.dir={smoke_data}"])
    data, window = open_data(cfg), stage_plan(cfg, "sft").seq_len
    tasks = load_suite(cfg, "train", n=8) + load_suite(cfg, "eval", n=8)
    first = [
        len(Transcript().add("system", make_system_prompt()).add("user", t.prompt).render(data, True)[0]) for t in tasks
    ]
    assert 200 < max(first) < min(window, rl_context(cfg)), (first, window, rl_context(cfg))
    lengths = [len(ids) for ids, _ in sft_examples(data, cfg=cfg)]
    assert max(lengths) <= window + 1, (max(lengths), window)  # a row holds seq_len + 1 tokens (inputs and targets)


def test_the_cpu_scale_adopts_the_shipped_base():
    """The cpu scale starts from composer2's pretrained base (issue 49): its model and data sections are cpu-base's, the
    one the shipped file was trained at, and pretrain.base_from names that file, which holds that model and a record of
    its training (the commit and code digest, copying and loss curves)."""
    from composer2.config import load_config

    cpu, base = load_config("cpu"), load_config("cpu-base")
    assert cpu.model == base.model and cpu.data == base.data and cpu.model.tie_embeddings
    shipped = ROOT / cpu.pretrain.base_from
    ck = torch.load(shipped, weights_only=False)
    assert {k: ck["model_cfg"][k] for k in ("d_model", "n_layers", "tie_embeddings")} == {
        "d_model": cpu.model.d_model,
        "n_layers": cpu.model.n_layers,
        "tie_embeddings": True,
    }
    rec = ck["record"]
    assert rec["provenance"]["commit"] and rec["summary"]["steps"] == base.pretrain.base_steps
    assert rec["summary"]["copy"]["repeat"] <= 1.0  # the target of issue 49: it copies
    assert all(w.dtype == torch.bfloat16 for w in ck["model"].values() if w.is_floating_point())
