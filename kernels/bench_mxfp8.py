"""MXFP8 and NVFP4 kernels against copy bandwidth, torchao, BF16 and FP8 row-wise baselines, side by side in one run.

    python kernels/bench_mxfp8.py [--parts quant gemm moe parity nvfp4_quant nvfp4_gemm] [--quick]
    python kernels/bench_mxfp8.py --smoke          # CPU (Triton interpreter), tiny shapes: checks the script runs

Parts: `quant` (MXFP8 quantisation along rows and columns: GB/s vs a device-to-device copy and vs torchao's MXFP8
Triton kernels), `gemm` (MXFP8 grouped GEMM at MoE shapes and a dense GEMM: TFLOP/s vs BF16 `torch._grouped_mm` /
`mm`, FP8 row-wise `torch._scaled_grouped_mm` / `_scaled_mm`, and torchao's MXFP8 grouped GEMM where the device has
it), `moe` (an MoE layer forward+backward, `expert_backend` mxfp8 vs grouped_mm, BF16 autocast, and the forward
alone with the forward-only nvfp4 backend), `parity` (the smoke model trained 300 steps with each backend: `parity_run` below),
`nvfp4_quant` (NVFP4 quantisation: GB/s vs copy), `nvfp4_gemm` (NVFP4 grouped GEMM at the same shapes: TFLOP/s of
the `dequant` and, on sm_100, native `dot_scaled` paths vs BF16, with and without quantising the activations, plus
the error against FP64 on a slice of rows). Needs a CUDA device, except with `--smoke`, which runs every part on
tiny shapes on whatever device there is (the Triton interpreter on a CPU; CUDA-only baselines are skipped) and exits
1 if anything of ours failed. Prints tables and writes kernels/results/mxfp8_<device>.json (`--smoke`: a temporary
directory unless --out is given)."""

import argparse, json, os, platform, re, sys, tempfile, time, traceback
from pathlib import Path
import torch

RESULTS = Path(__file__).resolve().parent / "results"
DEV = "cuda"  # set by main(): "cpu" under --smoke without a GPU
SMOKE = False


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def free():
    if DEV == "cuda":
        torch.cuda.empty_cache()


def bench(fn, reps=None, warmup=3):
    "Median milliseconds of `fn` (CUDA events), after warm-up; L2 is not flushed (tensors here exceed it)."
    if DEV != "cuda":  # --smoke on a CPU: wall clock, a few repeats (the numbers only show that it ran)
        fn()
        ts = []
        for _ in range(reps or 1):
            t0 = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t0) * 1e3)
        return sorted(ts)[len(ts) // 2]
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    reps = reps or max(5, min(100, int(0.5 / max(one, 1e-6))))
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def attempt(name, fn, errors):
    "Run fn(); on failure record a one-line reason and return None."
    try:
        return fn()
    except Exception as e:
        errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return None


def quant_part(mx, quick, errors):
    dev = DEV
    shapes = [(16384, 2048), (16384, 8192)] if not quick else [(8192, 2048)]
    if SMOKE:
        shapes = [(64, 256)]
    out = []
    try:
        if DEV != "cuda":
            raise RuntimeError("skipped: torchao's MXFP8 kernels need CUDA")
        import torch.utils._triton as tut

        if not tut.has_triton():  # seen on the H100 image (torch 2.11 + triton 3.6): torchao then defines stubs only
            errors["torch.utils._triton.has_triton()"] = (
                "False here; patched to True before importing torchao's kernels"
            )
            tut.has_triton = lambda: True
        import importlib, torchao.prototype.mx_formats.kernels as aok

        if not hasattr(
            aok, "to_mxfp8_dim0_kernel"
        ):  # seen on the H100 image: torchao imported before Triton was usable
            errors["torchao kernels"] = "defined as stubs at import; reloaded"
            aok = importlib.reload(aok)
        triton_to_mxfp8_dim0, triton_to_mxfp8_dim1 = aok.triton_to_mxfp8_dim0, aok.triton_to_mxfp8_dim1
    except Exception as e:
        triton_to_mxfp8_dim0 = triton_to_mxfp8_dim1 = None
        if DEV == "cuda":
            errors["torchao import"] = f"{type(e).__name__}: {e}"
    for M, K in shapes:
        x = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        n = x.numel()
        copy_ms = bench(lambda: y.copy_(x))
        copy_gbs = 2 * n * 2 / copy_ms / 1e6
        qbytes = n * 2 + n + n // 32  # read bf16, write fp8 + one scale byte per 32
        offs = torch.tensor([M], dtype=torch.int32, device=dev)
        row = dict(shape=[M, K], copy_GBps=round(copy_gbs, 1))
        cands = {
            "ours rows (dim -1)": lambda: mx._quant_rows(x, "floor"),
            "ours rows rceil": lambda: mx._quant_rows(x, "rceil"),
            "ours cols (dim 0, same layout)": lambda: mx._quant_cols(x[None], offs, "floor"),
            "ours cols -> col-major (training layout)": lambda: mx._quant_cols(
                x[None], offs, "floor", transpose_out=True
            ),
        }
        if triton_to_mxfp8_dim0 is not None:
            cands["torchao rows floor"] = lambda: triton_to_mxfp8_dim0(x, 32, "floor")
            cands["torchao rows rceil"] = lambda: triton_to_mxfp8_dim0(x, 32, "rceil")
            cands["torchao cols -> col-major floor"] = lambda: triton_to_mxfp8_dim1(x, 32, "floor")
            cands["torchao cols -> col-major rceil"] = lambda: triton_to_mxfp8_dim1(x, 32, "rceil")
        try:  # torchao's path where its Triton kernels are unavailable (they need sm_100): its to_mx, compiled
            if DEV != "cuda":
                raise RuntimeError("skipped on CPU (torch.compile)")
            from torchao.prototype.mx_formats.mx_tensor import to_mx as ao_to_mx
            from torchao.prototype.mx_formats.config import ScaleCalculationMode as SCM

            ao_rows = torch.compile(lambda t: ao_to_mx(t, torch.float8_e4m3fn, 32, SCM.FLOOR))
            ao_cols = torch.compile(lambda t: ao_to_mx(t.t().contiguous(), torch.float8_e4m3fn, 32, SCM.FLOOR))
            cands["torchao to_mx rows floor (torch.compile)"] = lambda: ao_rows(x)
            cands["torchao to_mx cols -> col-major floor (torch.compile)"] = lambda: ao_cols(x)
        except Exception as e:
            if DEV == "cuda":
                errors["torchao to_mx compile"] = f"{type(e).__name__}: {e}"
        for name, fn in cands.items():
            ms = attempt(f"quant {name} {M}x{K}", lambda: bench(fn), errors)
            if ms is not None:
                row[name] = dict(
                    ms=round(ms, 4), GBps=round(qbytes / ms / 1e6, 1), of_copy=round(qbytes / ms / 1e6 / copy_gbs, 3)
                )
        row["autotuned"] = tuned_configs(mx)
        out.append(row)
    return out


def tuned_configs(mx):
    "The autotuner's choices so far, per kernel and key."
    kinds = dict(
        rows=mx._quant_rows_tuned,
        cols=mx._quant_cols_tuned,
        **{f"gemm_{k}": v for k, v in mx._gmm_tuned.items()},
        **{f"wgrad_{k}": v for k, v in mx._wgrad_tuned.items()},
        nvfp4_quant=mx._nvfp4_quant_tuned,
        **{f"nvfp4_gemm_{k}": v for k, v in mx._nvfp4_gmm_tuned.items()},
    )
    return {n: {str(k): str(c) for k, c in getattr(t, "cache", {}).items()} for n, t in kinds.items()}


def moe_groups(M, E, align=16, seed=0):
    "Uneven group sizes (multinomial over skewed expert popularity), multiples of `align`, summing to M."
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(E, generator=g) ** 2 + 0.05
    units = M // align
    sizes = torch.multinomial(p / p.sum(), units, replacement=True, generator=g).bincount(minlength=E) * align
    sizes[-1] += M - sizes.sum()
    return torch.cumsum(sizes, 0).to(torch.int32)


GEMM_SHAPES = [
    ("report MoE: 64 experts, hidden 2048 -> expert dim 1408, 16k rows", 16384, 2048, 1408, 64),
    ("report MoE down-proj: 1408 -> 2048", 16384, 1408, 2048, 64),
    ("gpu preset w_in: 32 experts, 1024 -> 2x512, 32k rows (8k tokens x top-4)", 32768, 1024, 1024, 32),
    ("gpu preset w_out: 512 -> 1024", 32768, 512, 1024, 32),
    ("dense 8192^3", 8192, 8192, 8192, 1),
]
SMOKE_GEMM_SHAPES = [
    ("smoke: 4 experts, 64 -> 64, 256 rows", 256, 64, 64, 4),
    ("smoke dense 128 x 64 x 96", 128, 64, 96, 1),
]


def gemm_shapes(quick):
    if SMOKE:
        return SMOKE_GEMM_SHAPES
    return GEMM_SHAPES[:1] + GEMM_SHAPES[-1:] if quick else GEMM_SHAPES


def gemm_part(mx, quick, errors):
    dev = DEV
    shapes = gemm_shapes(quick)
    out = []
    for name, M, K, N, E in shapes:
        a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        w = torch.randn(E, K, N, device=dev, dtype=torch.bfloat16) * 0.05
        offs = moe_groups(M, E).to(dev) if E > 1 else torch.tensor([M], dtype=torch.int32, device=dev)
        flop = 2 * M * K * N
        tf = lambda ms: round(flop / ms / 1e9, 1)
        row = dict(name=name, M=M, K=K, N=N, E=E)
        res = {}
        w_cm = w.transpose(-2, -1).contiguous().transpose(-2, -1)  # column-major experts (cuBLAS/CUTLASS-friendly)
        res.update(bf16_baselines(a, w, w_cm, offs, E, errors))
        # FP8 row-wise (per-row scale for A, per-column for B)
        a8, sa = (
            (a.float() / (a.float().abs().amax(1, keepdim=True) / 448)).to(torch.float8_e4m3fn),
            (a.float().abs().amax(1) / 448),
        )
        sb = w.float().abs().amax(1) / 448  # [E, N]
        w8 = (w.float() / sb[:, None, :]).to(torch.float8_e4m3fn).transpose(-2, -1).contiguous().transpose(-2, -1)
        if DEV != "cuda":
            pass  # no CPU kernels
        elif E > 1:
            res["fp8 row-wise torch._scaled_grouped_mm"] = attempt(
                "fp8 rowwise grouped",
                lambda: bench(lambda: torch._scaled_grouped_mm(a8, w8, sa, sb, offs=offs, out_dtype=torch.bfloat16)),
                errors,
            )
        else:
            res["fp8 row-wise torch._scaled_mm"] = attempt(
                "fp8 rowwise mm",
                lambda: bench(
                    lambda: torch._scaled_mm(a8, w8[0], sa[:, None], sb[0][None, :], out_dtype=torch.bfloat16)
                ),
                errors,
            )
        # ours: operands quantised once (GEMM alone), and quantisation included
        xq = mx.to_mx(a)
        wd, ws, wst, wsst = mx._quant_w_along_k(w, "floor")
        for impl in ("fp8", "dot_scaled"):
            run = lambda impl=impl: mx._launch_grouped(
                xq[0], xq[1], wd, ws, wst, wsst, offs, M, N, K, E, torch.bfloat16, impl
            )
            res[f"mxfp8 ours ({impl})"] = attempt(f"ours {impl}", lambda: bench(run), errors)
        best_impl = (
            "fp8"
            if (res.get("mxfp8 ours (fp8)") or 1e9) <= (res.get("mxfp8 ours (dot_scaled)") or 1e9)
            else "dot_scaled"
        )

        def with_quant():
            xd, xs = mx._quant_rows(a, "floor")
            d, s, st, sst = mx._quant_w_along_k(w, "floor")
            return mx._launch_grouped(xd, xs, d, s, st, sst, offs, M, N, K, E, torch.bfloat16, best_impl)

        res[f"mxfp8 ours ({best_impl}) incl. quantising x and w"] = attempt(
            "ours incl quant", lambda: bench(with_quant), errors
        )

        # torchao's MXFP8 grouped GEMM (needs sm_100 block-scaled MMA)
        def ao(pref):
            from torchao.prototype.moe_training.mxfp8_grouped_mm import _to_mxfp8_then_scaled_grouped_mm
            from torchao.prototype.mx_formats.config import KernelPreference

            kp = getattr(KernelPreference, pref)
            return bench(
                lambda: _to_mxfp8_then_scaled_grouped_mm(
                    a, w_cm, offs=offs, out_dtype=torch.bfloat16, kernel_preference=kp
                )
            )

        if E > 1 and DEV == "cuda":
            res["torchao mxfp8 grouped AUTO (incl. quant)"] = attempt(
                "torchao mxfp8 grouped AUTO", lambda: ao("AUTO"), errors
            )
            res["torchao mxfp8 grouped EMULATED (incl. quant)"] = attempt(
                "torchao mxfp8 grouped EMULATED", lambda: ao("EMULATED"), errors
            )
        row["autotuned"] = tuned_configs(mx)
        # correctness at this shape: ours vs fp64 on a slice of rows of the first group with rows
        row["results"] = {k: dict(ms=round(v, 4), TFLOPs=tf(v)) for k, v in res.items() if v is not None}
        bf = [v for k, v in res.items() if k.startswith("bf16") and v is not None]
        ours = [v for k, v in res.items() if k.startswith("mxfp8 ours (") and "incl" not in k and v is not None]
        if bf and ours:
            row["ours_vs_bf16"] = round(min(bf) / min(ours), 3)
        out.append(row)
        del a, w, w_cm, a8, w8, xq, wd
        free()
    return out


def bf16_baselines(a, w, w_cm, offs, E, errors):
    "BF16 grouped (or dense) GEMM timings: the baseline every quantised GEMM is compared with."
    res = {}
    if E > 1:
        res["bf16 torch._grouped_mm"] = attempt(
            "bf16 grouped", lambda: bench(lambda: torch._grouped_mm(a, w, offs=offs)), errors
        )
        res["bf16 torch._grouped_mm (col-major B)"] = attempt(
            "bf16 grouped cm", lambda: bench(lambda: torch._grouped_mm(a, w_cm, offs=offs)), errors
        )
    else:
        res["bf16 torch.mm"] = attempt("bf16 mm", lambda: bench(lambda: a @ w[0]), errors)
    return res


def moe_part(mx, quick, errors):
    from composer2.config import load_config
    from composer2.model.moe import MoE

    dev = DEV
    cases = [
        (
            "report MoE: d 2048, 64 experts x 1408, top-4, 4096 tokens",
            ["model.d_model=2048", "model.n_experts=64", "model.expert_hidden=1408", "model.top_k=4"],
            4096,
        ),
        ("gpu preset MoE: d 1024, 32 experts x 512, top-4, 8192 tokens", [], 8192),
    ]
    if quick:
        cases = cases[1:]
    if SMOKE:
        cases = [("smoke MoE: d 64, 8 experts x 32, top-2, 32 tokens", [], 32)]
    out = []
    for name, ov, T in cases:
        cfg = load_config("smoke" if SMOKE else "gpu", overrides=ov).model
        torch.manual_seed(0)
        moe = MoE(cfg).to(dev)
        torch.nn.init.normal_(moe.w_in, std=0.02)
        torch.nn.init.normal_(moe.w_out, std=0.02)
        x = torch.randn(T, cfg.d_model, device=dev, requires_grad=True)
        gy = torch.randn(T, cfg.d_model, device=dev, dtype=torch.bfloat16 if dev == "cuda" else torch.float32)
        row = dict(name=name)
        ys = {}
        for backend in ("grouped_mm", "mxfp8", "nvfp4"):
            moe.cfg.expert_backend = backend

            def step(fwd_only=False, grad=True):
                with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"), torch.set_grad_enabled(grad):
                    y, _ = moe(x)
                if not fwd_only:
                    y.backward(gy)
                return y

            times = {}
            if backend != "nvfp4":  # nvfp4 is forward-only (serving, rollouts): timed without autograd only
                times["fwd_bwd_ms"] = attempt(f"moe {backend}", lambda: bench(step), errors)
                times["fwd_ms"] = attempt(f"moe fwd {backend}", lambda: bench(lambda: step(True)), errors)
            times["fwd_nograd_ms"] = attempt(
                f"moe fwd no_grad {backend}", lambda: bench(lambda: step(True, False)), errors
            )
            row[backend] = {k: round(v, 3) for k, v in times.items() if v is not None}
            ys[backend] = attempt(f"moe y {backend}", lambda: step(True, False).float().detach(), errors)
        g = row.get("grouped_mm", {})
        if "fwd_bwd_ms" in g and "fwd_bwd_ms" in row.get("mxfp8", {}):
            row["speedup_fwd_bwd"] = round(g["fwd_bwd_ms"] / row["mxfp8"]["fwd_bwd_ms"], 3)
        if "fwd_ms" in g and "fwd_ms" in row.get("mxfp8", {}):
            row["speedup_fwd"] = round(g["fwd_ms"] / row["mxfp8"]["fwd_ms"], 3)
        if "fwd_nograd_ms" in g and "fwd_nograd_ms" in row.get("nvfp4", {}):
            row["speedup_fwd_nograd_nvfp4"] = round(g["fwd_nograd_ms"] / row["nvfp4"]["fwd_nograd_ms"], 3)
        for b in ("mxfp8", "nvfp4"):
            if ys.get(b) is not None and ys.get("grouped_mm") is not None:
                row["rel_gap_y" + ("" if b == "mxfp8" else "_nvfp4")] = round(
                    ((ys[b] - ys["grouped_mm"]).norm() / ys["grouped_mm"].norm()).item(), 4
                )
        out.append(row)
        del moe, x
        free()
    return out


def parity_run(
    backend: str,
    steps: int = 300,
    device: str = "cuda",
    autocast: bool = True,
    seed: int = 0,
    batch: int = 16,
    seq: int = 128,
    lr: float = 3e-3,
) -> list[float]:
    "Train the smoke model on this repo's source bytes with `expert_backend=backend`; return the loss per step."
    from composer2.config import load_config
    from composer2.model.moe import MoETransformer, training_loss
    import composer2

    src = b"".join(p.read_bytes() for p in sorted(Path(composer2.__file__).resolve().parent.glob("*.py")))
    data = torch.tensor(list(src), dtype=torch.long)
    cfg = load_config("smoke", overrides=[f"model.expert_backend={backend}", "model.vocab_size=256"]).model
    torch.manual_seed(seed)
    model = MoETransformer(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        i = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        xy = torch.stack([data[j : j + seq + 1] for j in i.tolist()]).to(device)
        for pg in opt.param_groups:
            pg["lr"] = lr * min(1.0, (step + 1) / 20)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            loss = training_loss(model, xy[:, :-1], xy[:, 1:])["loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.update_router_biases()
        losses.append(loss.item())
    return losses


def parity_part(mx, quick, errors):
    steps = 2 if SMOKE else 100 if quick else 300
    kw = dict(device="cpu", autocast=False, batch=2, seq=16) if SMOKE and DEV != "cuda" else {}
    t0 = time.time()
    curves = {
        "bf16 grouped_mm": parity_run("grouped_mm", steps, **kw),
        "mxfp8": parity_run("mxfp8", steps, **kw),
        "fp32 loop": parity_run("loop", steps, **{**kw, "autocast": False}),
    }
    win = min(10, steps)
    sm = lambda c: torch.tensor(c).unfold(0, win, win).mean(1)
    ref = sm(curves["bf16 grouped_mm"])
    gap = lambda k: round(((sm(curves[k]) - ref).abs() / ref).max().item(), 4)
    raw = lambda k: round(
        (
            (torch.tensor(curves[k]) - torch.tensor(curves["bf16 grouped_mm"])).abs()
            / torch.tensor(curves["bf16 grouped_mm"])
        )
        .max()
        .item(),
        4,
    )
    return dict(
        steps=steps,
        seconds=round(time.time() - t0, 1),
        final={k: round(sum(v[-10:]) / 10, 4) for k, v in curves.items()},
        max_rel_gap_10step_means={"mxfp8 vs bf16": gap("mxfp8"), "fp32 vs bf16": gap("fp32 loop")},
        max_rel_gap_per_step={"mxfp8 vs bf16": raw("mxfp8"), "fp32 vs bf16": raw("fp32 loop")},
        curves={k: [round(v, 4) for v in c[::10]] for k, c in curves.items()},
    )


def nvfp4_quant_part(mx, quick, errors):
    "NVFP4 quantisation (per-row FP32 scale, E4M3 per 16, packed E2M1) of bf16 activations: GB/s vs copy."
    shapes = [(16384, 2048), (16384, 8192), (32768, 1024)] if not quick else [(8192, 2048)]
    if SMOKE:
        shapes = [(64, 256)]
    out = []
    for M, K in shapes:
        x = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        y = torch.empty_like(x)
        n = x.numel()
        copy_ms = bench(lambda: y.copy_(x))
        copy_gbs = 2 * n * 2 / copy_ms / 1e6
        qbytes = n * 2 + n // 2 + n // 16 + M * 4  # read bf16; write packed fp4, E4M3 per 16, fp32 per row
        row = dict(shape=[M, K], copy_GBps=round(copy_gbs, 1), bytes_per_call=qbytes)
        for name, fn in {
            "ours to_nvfp4 (triton)": lambda: mx.to_nvfp4(x),
            "torch reference (eager)": lambda: mx.to_nvfp4(x, backend="torch"),
        }.items():
            if SMOKE and "torch" in name and DEV != "cuda":
                continue
            ms = attempt(f"nvfp4 quant {name} {M}x{K}", lambda: bench(fn), errors)
            if ms is not None:
                row[name] = dict(
                    ms=round(ms, 4), GBps=round(qbytes / ms / 1e6, 1), of_copy=round(qbytes / ms / 1e6 / copy_gbs, 3)
                )
        ok = attempt(
            f"nvfp4 quant exactness {M}x{K}",
            lambda: all(
                torch.equal(
                    a.view(torch.uint8).cpu() if a.dtype != torch.float32 else a.view(torch.int32).cpu(),
                    b.view(torch.uint8).cpu() if b.dtype != torch.float32 else b.view(torch.int32).cpu(),
                )
                for a, b in zip(mx.to_nvfp4(x[:256]), mx.to_nvfp4(x[:256].cpu(), backend="torch"))
            ),
            errors,
        )
        row["bit_exact_vs_torch_first_256_rows"] = ok
        if ok is False:
            errors[f"nvfp4 quant exactness {M}x{K}"] = "Triton and torch reference differ"
        out.append(row)
        del x, y
        free()
    return out


def nvfp4_gemm_part(mx, quick, errors):
    "NVFP4 grouped GEMM (forward) at the MoE shapes: TFLOP/s per path vs BF16, and the error vs FP64 on a row slice."
    out = []
    native = DEV == "cuda" and torch.cuda.get_device_capability()[0] >= 10
    for name, M, K, N, E in gemm_shapes(quick):
        a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16)
        w = torch.randn(E, K, N, device=DEV, dtype=torch.bfloat16) * 0.05
        offs = moe_groups(M, E).to(DEV) if E > 1 else torch.tensor([M], dtype=torch.int32, device=DEV)
        flop = 2 * M * K * N
        row = dict(name=name, M=M, K=K, N=N, E=E, native_dot_scaled=native)
        res = bf16_baselines(a, w, w.transpose(-2, -1).contiguous().transpose(-2, -1), offs, E, errors)
        xq, wq = mx.to_nvfp4(a), mx.nvfp4_weights(w)
        # dot_scaled off sm_100 is Triton's BF16 emulation: timed too, for the record
        for impl in mx.NVFP4_IMPLS:
            res[f"nvfp4 ours ({impl})"] = attempt(
                f"nvfp4 {impl} {name}",
                lambda impl=impl: bench(lambda: mx.nvfp4_grouped_mm(xq, wq, offs, torch.bfloat16, impl=impl)),
                errors,
            )
        best = mx.default_nvfp4_impl()
        res[f"nvfp4 ours ({best}) incl. quantising x"] = attempt(
            f"nvfp4 incl quant {name}",
            lambda: bench(lambda: mx.nvfp4_grouped_mm(mx.to_nvfp4(a), wq, offs, torch.bfloat16, impl=best)),
            errors,
        )
        row["results"] = {
            k: dict(ms=round(v, 4), TFLOPs=round(flop / v / 1e9, 3)) for k, v in res.items() if v is not None
        }
        bf = [v for k, v in res.items() if k.startswith("bf16") and v is not None]
        ours = [v for k, v in res.items() if k.startswith("nvfp4 ours (") and "incl" not in k and v is not None]
        if bf and ours:
            row["ours_vs_bf16"] = round(min(bf) / min(ours), 3)

        # correctness at this shape: the first 128 rows of the first non-empty group against FP64
        def err(impl):
            g = int((offs > 0).nonzero()[0])
            r0 = 0 if g == 0 else int(offs[g - 1])
            r1 = min(int(offs[g]), r0 + 128)
            xs = tuple(t[r0:r1].contiguous() for t in xq)
            y = mx.nvfp4_grouped_mm(
                xs,
                tuple(t[g : g + 1].contiguous() for t in wq),
                torch.tensor([r1 - r0], dtype=torch.int32, device=DEV),
                torch.float32,
                impl=impl,
            )
            ref = mx.from_nvfp4(*xs, dtype=torch.float64) @ mx.from_nvfp4(*(t[g] for t in wq), dtype=torch.float64).T
            return float(((y.double() - ref).abs().max() / ref.abs().max()).item())

        row["rel_err_vs_fp64"] = {
            impl: attempt(f"nvfp4 err {impl} {name}", lambda impl=impl: err(impl), errors) for impl in mx.NVFP4_IMPLS
        }
        row["autotuned"] = tuned_configs(mx)
        out.append(row)
        del a, w, xq, wq
        free()
    return out


PARTS = dict(
    quant=quant_part,
    gemm=gemm_part,
    moe=moe_part,
    parity=parity_part,
    nvfp4_quant=nvfp4_quant_part,
    nvfp4_gemm=nvfp4_gemm_part,
)


def main():
    global DEV, SMOKE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--parts",
        nargs="+",
        choices=list(PARTS),
        default=None,
        help="default: quant gemm moe parity nvfp4_quant nvfp4_gemm",
    )
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device (Triton interpreter on a CPU)")
    ap.add_argument("--out", default=None, help=f"results directory (default {RESULTS}; --smoke: a temporary one)")
    args = ap.parse_args()
    SMOKE = args.smoke
    if not torch.cuda.is_available():
        if not SMOKE:
            sys.exit("bench_mxfp8: needs a CUDA device (or --smoke)")
        DEV = "cpu"
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before composer2.kernels.mx_quant defines its kernels
    import triton
    from types import SimpleNamespace
    import composer2.kernels.mx_quant, composer2.kernels.mx_gemm, composer2.kernels.nvfp4

    mx = SimpleNamespace(
        **{**vars(composer2.kernels.mx_quant), **vars(composer2.kernels.mx_gemm), **vars(composer2.kernels.nvfp4)}
    )  # the three kernel modules
    dev = torch.cuda.get_device_name() if DEV == "cuda" else f"CPU {platform.machine()} (Triton interpreter)"
    info = dict(
        device=dev,
        capability=list(torch.cuda.get_device_capability()) if DEV == "cuda" else None,
        torch=torch.__version__,
        triton=triton.__version__,
        default_impl=mx.default_impl(),
        default_nvfp4_impl=mx.default_nvfp4_impl(),
        smoke=SMOKE,
        date=time.strftime("%Y-%m-%d"),
    )
    try:
        import torchao

        info["torchao"] = torchao.__version__
    except Exception:
        info["torchao"] = None
    res, errors = dict(info=info), {}
    for part in args.parts or list(PARTS):
        t0 = time.time()
        try:
            res[part] = PARTS[part](mx, args.quick, errors)
        except Exception:
            errors[part] = traceback.format_exc()[-1500:]
        print(f"[{part}: {time.time() - t0:.0f}s]", flush=True)
    res["errors"] = errors
    print(json.dumps(res, indent=1))
    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / "composer2_bench_smoke" if SMOKE else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", dev.lower()).strip("-")
    path = out / f"mxfp8_{slug}{'_smoke' if SMOKE else '_quick' if args.quick else ''}.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    print("wrote", path)
    if SMOKE and errors:
        sys.exit(f"bench_mxfp8 --smoke: {len(errors)} failure(s): {', '.join(errors)}")


if __name__ == "__main__":
    main()
