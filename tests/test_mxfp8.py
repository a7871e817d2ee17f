"""MXFP8 / NVFP4 kernels from the outside: the benchmark script's --smoke run (so it cannot rot while no GPU runs it),
the `nvfp4` expert backend through the real CLI (config rule, training refused in one line), and the kernels still
working when Triton was imported before composer2.kernels.mx_quant (as torch.optim does through torch._dynamo), and (slow)
the smoke model's training curve with MXFP8 experts against FP32 on the CPU.
The kernels' own correctness tests live in nbs/20_mx_quant, 21_mx_gemm and 22_nvfp4; the MoE layer's in nbs/31_model."""

import json, os, subprocess, sys
import pytest
from conftest import ROOT, c2, one_line_error

BENCH = ROOT / "kernels" / "bench_mxfp8.py"


def run_bench(tmp_path, *parts):
    "Run kernels/bench_mxfp8.py --smoke (Triton interpreter without a GPU); return its JSON results."
    cmd = [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)] + (["--parts", *parts] if parts else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    (path,) = tmp_path.glob("mxfp8_*_smoke.json")
    res = json.loads(path.read_text())
    assert res["info"]["smoke"] and res["errors"] == {}, res["errors"]
    return res


@pytest.mark.e2e  # the kernels' own notebooks (20-22) check them; this runs the benchmark script around them
def test_bench_smoke_kernels(tmp_path):
    res = run_bench(tmp_path, "quant", "gemm", "nvfp4_quant", "nvfp4_gemm")
    (q,) = res["nvfp4_quant"]
    assert (
        q["ours to_nvfp4 (triton)"]["ms"] > 0 and q["bit_exact_vs_torch_first_256_rows"] is True
    )  # timed (GB/s rounds to 0 under the interpreter)
    for row in res["nvfp4_gemm"]:
        assert {"nvfp4 ours (dequant)", "nvfp4 ours (dot_scaled)"} <= set(row["results"]), row["results"]
        assert all(e < 1e-5 for e in row["rel_err_vs_fp64"].values()), row["rel_err_vs_fp64"]
    assert any(k.startswith("mxfp8 ours") for k in res["gemm"][0]["results"]) and res["quant"][0]["ours rows (dim -1)"]


@pytest.mark.slow
def test_bench_smoke_all_parts(tmp_path):
    res = run_bench(tmp_path)
    assert {"quant", "gemm", "moe", "parity", "nvfp4_quant", "nvfp4_gemm"} <= set(res)
    (moe,) = res["moe"]
    assert "fwd_bwd_ms" in moe["mxfp8"] and "fwd_nograd_ms" in moe["nvfp4"] and "fwd_bwd_ms" not in moe["nvfp4"]
    assert res["parity"]["steps"] == 2


def test_nvfp4_config_rule():
    one_line_error(
        c2("config", "--scale", "smoke", "model.expert_backend=nvfp4", "model.expert_hidden=40"),
        "model.expert_backend=nvfp4",
        "multiples of 16 (the NVFP4 block)",
    )
    r = c2("config", "--scale", "smoke", "model.expert_backend=nvfp4")
    assert r.returncode == 0 and "nvfp4" in r.stdout, r.stderr


def test_train_refuses_nvfp4(smoke_data, tmp_path):
    r = c2(
        "train",
        "--scale",
        "smoke",
        f"data.dir={smoke_data}",
        "model.expert_backend=nvfp4",
        "train.steps=2",
        "train.eval_tokens=64",
        "--out",
        str(tmp_path / "run"),
    )
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    # the error is one line (a progress bar may share the terminal line it starts on)
    errs = [l for l in r.stderr.replace("\r", "\n").splitlines() if "c2: error: " in l]
    assert len(errs) == 1 and "forward-only" in errs[0] and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_kernels_after_triton_was_imported_first():
    # torch.optim imports torch._dynamo, which imports Triton before TRITON_INTERPRET is set on a CPU machine
    code = """
import torch, torch._dynamo
opt = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))])
from composer2.kernels.mx_quant import INTERPRET, to_mx
from composer2.kernels.nvfp4 import to_nvfp4, nvfp4_expert_mm
x = torch.randn(32, 64)
assert INTERPRET or torch.cuda.is_available()
a, b = to_nvfp4(x.to("cuda" if torch.cuda.is_available() else "cpu")), to_nvfp4(x, backend="torch")
assert all(torch.equal(u.cpu().view(torch.uint8), v.view(torch.uint8)) for u, v in zip(a[:2], b[:2]))
to_mx(x.to(a[0].device))
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


@pytest.mark.slow
def test_mxfp8_training_follows_fp32_on_cpu():
    """The smoke model trained with `expert_backend: mxfp8` (kernels interpreted, ~15 s a step on 2 cores) follows the
    FP32 `loop` curve within 5% (10-step means) over C2_MX_PARITY_STEPS steps (default 40); the GPU run, 300 steps
    under BF16 autocast, is `kernels/bench_mxfp8.py --parts parity`."""
    code = f"""
import os, sys, torch
sys.path.insert(0, {str(ROOT / "kernels")!r})
from bench_mxfp8 import parity_run
steps = int(os.environ.get("C2_MX_PARITY_STEPS", 40))
cpu = {{b: parity_run(b, steps=steps, device="cpu", autocast=False, batch=8, seq=64) for b in ("loop", "mxfp8")}}
m = lambda c: torch.tensor(c).unfold(0, 10, 10).mean(1)
print(((m(cpu["mxfp8"]) - m(cpu["loop"])).abs() / m(cpu["loop"])).max().item())
"""
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=ROOT,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert float(r.stdout.split()[-1]) < 0.05, r.stdout
