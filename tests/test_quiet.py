"""The first commands a newcomer runs say what they do and nothing else: the notices libraries print on every run
(Lightning's tips and accelerator lines, its srun hint, torch.load's weights_only note, a pytree deprecation, torchao's
CUDA extensions a CPU torch cannot load, Lightning's `Epoch 0/-2` bar) are silenced at their source."""

from conftest import c2

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


def test_train_and_export_are_quiet(smoke_data, tmp_path):
    data = f"data.dir={smoke_data}"
    # a few steps with a checkpoint (Lightning's save, where weights_only was noted) and a validation; the heartbeat
    # of the final evaluation at 1 s
    r = c2(
        "train",
        "--scale",
        "smoke",
        data,
        "train.steps=4",
        "train.eval_every=2",
        "pretrain.ckpt_every=2",
        "--out",
        str(tmp_path / "run"),
        env={"C2_HEARTBEAT_S": "1", "COLUMNS": "200"},
    )
    assert_quiet(r)
    assert "stage train" in r.stdout and "trained 4 steps" in r.stdout  # the bar names the stage
    r = c2(
        "export",
        "--scale",
        "smoke",
        data,
        "--checkpoint",
        str(tmp_path / "run" / "final.pt"),
        "--out",
        str(tmp_path / "hf"),
    )
    assert_quiet(r)
