"""Pretraining steps at the cpu scale before and after the CPU speed-ups, side by side, and the machine's matmul peak.

    python kernels/bench_pretrain_cpu.py [--threads 1] [--steps 30] [--repeats 3] [--bf16] [--compile]

What it measures: whole training steps of the `base` stage as `PretrainModule` runs them under Lightning (forward and
loss of `training_loss` without the MTP modules, backward, gradient clipping, AdamW from `configure_optimizers`, the
router-bias update, the scheduler) on the cpu config (batch 8 x 256 tokens), from the same initial weights (seed 0)
over the same batches (a synthetic Markov-chain token stream, so that the loss falls as the model learns), two ways:

- `base`: composer2 at BASE_REV (loaded from git): plain AdamW (a dozen tensor ops per parameter) and glibc's default
  heap (the step's 32 MiB logits-sized tensors on fresh pages every step: ~33k page faults a step);
- `new`: this checkout: fused AdamW on a CPU (`configure_optimizers`) and `keep_cpu_heap` (`on_fit_start`);
- with `--bf16`, a third arm `bf16`: this checkout under CPU autocast to bfloat16 (what Lightning's `bf16-mixed` does;
  on a CPU with AMX its bf16 matmuls run ~7x the fp32 rate), attention kept in float32 -- not what the library's
  trainer does on a CPU (32-true), but what it would gain.

Every arm trains BASE_REV's cpu shape (its scales: the old code cannot read today's), which differs from today's only in
the untied unembedding: the same FLOPs.

The two run as two processes that take turns step by step (the order alternating), so that each pair of steps meets the
same load on a shared machine; `--repeats` such pairs, one after the other. Reported per arm: the median step time over
the steps after the first 3, in process CPU seconds (user + system: what a step costs this process, robust to other
processes taking the cores) and in wall seconds, as tokens/s; new / base as the ratio of the medians and as the median
of the step-by-step ratios; page faults and system seconds a step; the achieved GFLOP/s (FLOPs counted from the config:
`step_flops`) against this machine's fp32 matmul rate (a 2048^3 matmul and the step's own shapes, same threads); and
the largest |loss difference| between the two arms' curves, step by step, next to a control: the base code from weights
times (1 + 2^-23), one float32 rounding step away, which shows how far rounding alone moves the curve as routing
decisions flip. Each arm must repeat itself exactly across pairs. With `--compile`, one more pair: the new arm against
itself with the loss (forward, and through AOTAutograd the backward) under `torch.compile` from an empty compile cache:
the compile time (first step minus a steady one), the steady step, and after how many steps the compile pays. The
routed experts stay outside the compiled graph there (`F.grouped_mm` has no float32 CPU meta kernel), so this is what
compiling the model as it is costs and gains.

Results are printed and merged into kernels/results/pretrain_cpu_<device>.json, one entry per thread count.

What it is not: Lightning's own loop (its logging and callbacks add ~1 ms a step), the MTP stages, or a GPU
measurement (`c2 pretrain --scale gpu`: kernels/README.md).
"""

import argparse, dataclasses, json, os, resource, statistics, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_REV = "a3e2e4e"  # main before the CPU speed-ups (plain AdamW, glibc's default heap)
WARMUP = 3  # steps not timed (the first allocates the heap and the optimizer state)
SHAPES = [  # (M, K, N) of the step's matmuls: the vocabulary head's forward, input and weight gradients, ...
    (2048, 192, 4096),
    (2048, 4096, 192),
    (4096, 2048, 192),
    (2048, 192, 192),  # attention projections
    (2048, 192, 1024),  # the dense layer
    (256, 192, 256),  # one routed expert's input projection (~256 rows of 2048 x 2 / 16 experts)
    (256, 128, 192),  # its output projection
]


def step_flops(m, batch: int, seq: int) -> dict:
    """FLOPs of one training step of model config `m` (forward + backward = 3 x forward): matmuls (attention
    projections, dense and shared-expert SwiGLUs, router, the top-k routed experts, vocabulary head) and causal
    attention (QK^T and PV over the (T + 1) / 2 keys a query sees on average). Embeddings and elementwise work are not
    counted."""
    d, hd, H, Hkv = m.d_model, m.head_dim, m.n_heads, m.n_kv_heads
    attn_proj = 2 * d * (2 * H * hd + 2 * Hkv * hd)
    dense = 2 * 3 * d * m.dense_hidden
    expert = 2 * 3 * d * m.expert_hidden
    moe = 2 * d * m.n_experts + m.top_k * expert + m.n_shared_experts * expert
    n_moe = m.n_layers - m.n_dense_layers
    head = 2 * d * m.vocab_size
    mm = m.n_layers * attn_proj + m.n_dense_layers * dense + n_moe * moe + head
    attn = m.n_layers * 4 * H * hd * (seq + 1) / 2
    tokens = batch * seq
    return dict(matmul=3 * mm * tokens, attention=3 * attn * tokens, total=3 * (mm + attn) * tokens)


def matmul_peak(threads: int, seconds: float = 0.4) -> dict:
    "fp32 GFLOP/s of a 2048^3 matmul and of each of SHAPES on `threads` threads (median of 5 timings)."
    import torch

    torch.set_num_threads(threads)
    out = {}
    for M, K, N in [(2048, 2048, 2048), *SHAPES]:
        a, b = torch.randn(M, K), torch.randn(K, N)
        c = a @ b
        n = max(3, int(seconds * 1e11 / (2 * M * K * N)))
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                torch.mm(a, b, out=c)
            ts.append((time.perf_counter() - t) / n)
        out[f"{M}x{K}x{N}"] = round(2 * M * K * N / statistics.median(ts) / 1e9, 1)
    return out


def markov_batches(steps: int, batch: int, seq: int, vocab: int, seed: int = 0) -> list:
    "Batches (x, y, mask) of a fixed random Markov chain over `vocab` tokens (8 successors each): learnable structure."
    import numpy as np, torch

    rng = np.random.default_rng(seed)
    succ = rng.integers(0, vocab, (vocab, 8))
    cum = rng.dirichlet(np.full(8, 0.5), vocab).cumsum(1)
    out = []
    for _ in range(steps):
        rows = np.empty((batch, seq + 1), dtype=np.int64)
        rows[:, 0] = rng.integers(0, vocab, batch)
        for t in range(seq):
            pick = (rng.random(batch)[:, None] > cum[rows[:, t]]).sum(1).clip(max=7)
            rows[:, t + 1] = succ[rows[:, t], pick]
        b = torch.from_numpy(rows)
        out.append((b[:, :-1], b[:, 1:], torch.ones(batch, seq)))
    return out


def arm(path: str, threads: int, compile_: bool, perturb: bool):
    """Train on the saved batches with the importable composer2 (this checkout or BASE_REV's), one step per line read
    from stdin, printing one JSON line per step (its CPU and wall seconds, page faults, system seconds and loss).
    `perturb`: every initial weight times (1 + 2^-23), about one float32 rounding step (the control of the loss gap)."""
    import numpy as np, torch
    from composer2.config import load_config
    from composer2.model.moe import training_loss
    from composer2.pretrain.stages import PretrainModule, stage_plan

    torch.set_num_threads(threads)
    batches = torch.load(path, weights_only=False)
    cfg = load_config(scale="cpu")
    plan = dataclasses.replace(stage_plan(cfg, "base"), steps=len(batches))
    torch.manual_seed(0)
    module = PretrainModule(cfg, plan, cfg.data.vocab_size, np.zeros(0, dtype=np.int64))
    model = module.model.train()
    if perturb:
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + 2**-23)
    module.on_fit_start()  # the new code keeps the heap here (a CPU fit); BASE_REV's is Lightning's no-op
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    params = [p for p in model.parameters() if p.requires_grad]
    loss_fn = lambda x, y, m: training_loss(model, x, y, m, with_mtp=plan.train_mtp)["loss"]
    if os.environ.get("C2_BENCH_BF16"):  # the bf16 arm: what Lightning's bf16-mixed does on a CPU, attention in fp32
        loss_fn = bf16_mixed(loss_fn)
    if compile_:
        from composer2.model import moe

        moe.MoE._grouped = torch.compiler.disable(moe.MoE._grouped)
        loss_fn = torch.compile(loss_fn)
    fused = any(g.get("fused") for g in opt.param_groups)
    print(json.dumps(dict(ready=True, fused_adamw=bool(fused))), flush=True)
    for x, y, m in batches:
        sys.stdin.readline()  # the parent's go: the arms take turns, step by step
        r0, c0, w0 = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
        loss = loss_fn(x, y, m)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.train.grad_clip)  # as Lightning's gradient_clip_val does
        opt.step()
        model.update_router_biases()  # PretrainModule.optimizer_step
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss = loss.item()
        cpu, wall, r1 = time.process_time() - c0, time.perf_counter() - w0, resource.getrusage(resource.RUSAGE_SELF)
        step = dict(cpu=cpu, wall=wall, loss=loss, faults=r1.ru_minflt - r0.ru_minflt, sys=r1.ru_stime - r0.ru_stime)
        print(json.dumps(step), flush=True)


def bf16_mixed(loss_fn):
    """`loss_fn` under CPU autocast to bfloat16 (matmuls in bf16 -- AMX tiles where the CPU has them -- with float32
    weights, optimizer and loss), attention kept in float32: PyTorch's CPU flash-attention backward is slower in bf16
    than in fp32 (measured here: 96 against 41 ms a step), so autocast alone would give part of the gain back."""
    import torch
    from composer2.model import kvcache, moe

    fp32_attention = kvcache.attention

    def attention(q, k, v, mask=None):
        with torch.autocast("cpu", enabled=False):
            return fp32_attention(q.float(), k.float(), v.float(), mask)

    moe.attention = attention

    def run(x, y, m):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return loss_fn(x, y, m)

    return run


def lockstep(arms: dict, path: Path, threads: int, steps: int, scales: Path) -> dict:
    """Run the arms {name: (source tree, compile, perturb, extra env)} as processes that take turns step by step (the
    order alternating every step), so that each pair of steps meets the same load on a shared machine; per arm, its
    steps' records as lists (cpu, wall, loss, faults, sys) and whether its AdamW was fused."""
    procs = {}
    for name, (src, compile_, perturb, extra) in arms.items():
        env = {**os.environ, "PYTHONPATH": str(src), "C2_SCALES": str(scales), **extra}
        cmd = [sys.executable, __file__, "--arm", str(path), "--threads", str(threads)]
        cmd += ["--compile"] * compile_ + ["--perturb"] * perturb
        procs[name] = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    out = {}

    def read(name):
        line = procs[name].stdout.readline()
        if not line:
            raise SystemExit(f"bench_pretrain_cpu: the {name} arm failed (exit status {procs[name].wait()})")
        return json.loads(line)

    for name in procs:
        out[name] = dict(fused_adamw=read(name)["fused_adamw"], cpu=[], wall=[], loss=[], faults=[], sys=[])
    order = list(procs)
    for i in range(steps):
        for name in order if i % 2 == 0 else order[::-1]:
            procs[name].stdin.write("go\n")
            procs[name].stdin.flush()
            for k, v in read(name).items():
                out[name].setdefault(k, []).append(v)
    for p in procs.values():
        p.stdin.close()
        p.wait()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads in every process (default 1)")
    ap.add_argument("--steps", type=int, default=30, help=f"training steps per process (the first {WARMUP} untimed)")
    ap.add_argument("--repeats", type=int, default=3, help="pairs of processes (base and new), one after the other")
    ap.add_argument("--compile", action="store_true", help="also time the new arm under torch.compile (cold cache)")
    ap.add_argument("--bf16", action="store_true", help="also time the new code under bf16 autocast (a third arm)")
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    ap.add_argument("--arm", help=argparse.SUPPRESS)
    ap.add_argument("--perturb", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.arm:
        return arm(a.arm, a.threads, a.compile, a.perturb)
    if a.steps <= WARMUP:
        raise SystemExit(f"--steps must be more than the {WARMUP} warm-up steps")
    sys.path.insert(0, str(ROOT))
    import numpy as np, torch
    from bench_rollout import device_name, old_checkout, result_path, write_result
    from composer2.config import load_config

    cfg = load_config(scale="cpu")
    m = dataclasses.replace(cfg.model, vocab_size=cfg.data.vocab_size)
    B, T = cfg.train.batch_size, cfg.train.seq_len
    tok, flops = B * T, step_flops(m, B, T)
    peak = matmul_peak(a.threads)
    best = max(peak.values())
    print(f"fp32 matmul GFLOP/s on {a.threads} thread(s): " + ", ".join(f"{k} {v}" for k, v in peak.items()))
    print(
        f"one step: {flops['total'] / 1e9:.1f} GFLOP ({flops['matmul'] / 1e9:.1f} in matmuls, "
        f"{flops['attention'] / 1e9:.1f} in causal attention), {B} x {T} tokens; at the best matmul rate "
        f"{flops['total'] / best / 1e9:.3f} s",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="bench_pretrain_cpu-"))
    old = old_checkout(work / "old", BASE_REV)
    # BASE_REV's scales for every arm: its code does not know keys the scales gained since (pretrain.base_from, ...), so
    # all arms train BASE_REV's cpu shape -- today's but for the tied unembedding, the same FLOPs
    scales = work / "old_scales"
    scales.mkdir()
    arch = subprocess.run(["git", "-C", str(ROOT), "archive", BASE_REV, "nbs/scales"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(scales), "--strip-components=2"], input=arch.stdout, check=True)
    path = work / "batches.pt"
    torch.save(markov_batches(a.steps, B, T, m.vocab_size), path)
    runs, ratios = {"base": [], "new": [], **({"bf16": []} if a.bf16 else {})}, []
    control = None
    for r in range(a.repeats):
        arms = {"base": (old, False, False, {}), "new": (ROOT, False, False, {})}
        if a.bf16:
            arms["bf16"] = (ROOT, False, False, {"C2_BENCH_BF16": "1"})
        if r == 0:  # the old code from weights one rounding step away: how far float rounding alone moves the curve
            arms["control"] = (old, False, True, {})
        got = lockstep(arms, path, a.threads, a.steps, scales)
        control = got.pop("control", control)
        for name, v in got.items():
            runs[name].append(v)
        ratios += [b / n for b, n in zip(got["base"]["cpu"][WARMUP:], got["new"]["cpu"][WARMUP:])]
        med = {k: statistics.median(v["cpu"][WARMUP:]) for k, v in got.items()}
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in med.items()) + " CPU s/step", flush=True)
    arms = {}
    for name, rs in runs.items():
        cpu = float(np.median([s for r in rs for s in r["cpu"][WARMUP:]]))
        wall = float(np.median([s for r in rs for s in r["wall"][WARMUP:]]))
        arms[name] = dict(
            cpu_s_per_step=round(cpu, 4),
            wall_s_per_step=round(wall, 4),
            tokens_per_cpu_s=round(tok / cpu, 1),
            tokens_per_wall_s=round(tok / wall, 1),
            gflops_per_cpu_s=round(flops["total"] / cpu / 1e9, 1),
            page_faults_per_step=float(np.median([f for r in rs for f in r["faults"][WARMUP:]])),
            sys_s_per_step=round(float(np.median([s for r in rs for s in r["sys"][WARMUP:]])), 4),
            fused_adamw=rs[0]["fused_adamw"],
            repeats_identical=all(r["loss"] == rs[0]["loss"] for r in rs),
        )
    lb, ln, lc = runs["base"][0]["loss"], runs["new"][0]["loss"], control["loss"]
    gaps = [abs(u - v) for u, v in zip(lb, ln)]
    cgaps = [abs(u - v) for u, v in zip(lb, lc)]
    res = dict(
        threads=a.threads,
        steps=a.steps,
        warmup=WARMUP,
        repeats=a.repeats,
        base_rev=BASE_REV,
        tokens_per_step=tok,
        gflop_per_step=round(flops["total"] / 1e9, 2),
        gflop_matmul=round(flops["matmul"] / 1e9, 2),
        gflop_attention=round(flops["attention"] / 1e9, 2),
        matmul_gflops=peak,
        arms=arms,
        speedup_cpu=round(arms["base"]["cpu_s_per_step"] / arms["new"]["cpu_s_per_step"], 3),
        speedup_wall=round(arms["base"]["wall_s_per_step"] / arms["new"]["wall_s_per_step"], 3),
        speedup_paired_cpu=round(statistics.median(ratios), 3),
        max_loss_gap=max(gaps),
        max_loss_gap_relative=max(g / abs(u) for g, u in zip(gaps, lb)),
        control_max_loss_gap=max(cgaps),
        loss_gap_per_step=[float(f"{g:.3g}") for g in gaps],
        control_gap_per_step=[float(f"{g:.3g}") for g in cgaps],
        losses_base=lb,
        losses_new=ln,
    )
    for name, v in arms.items():
        print(
            f"{name}: {v['tokens_per_cpu_s']:.0f} tokens per CPU s ({v['cpu_s_per_step']:.3f} s/step), "
            f"{v['tokens_per_wall_s']:.0f} tokens per wall s; {v['gflops_per_cpu_s']:.1f} GFLOP/s = "
            f"{v['gflops_per_cpu_s'] / best:.0%} of the best matmul rate ({best} GFLOP/s); "
            f"{v['page_faults_per_step']:.0f} page faults, {v['sys_s_per_step'] * 1e3:.0f} ms system time a step; "
            f"fused AdamW {v['fused_adamw']}; repeats identical {v['repeats_identical']}"
        )
    print(
        f"speed-up new / base: {res['speedup_cpu']:.3f}x (CPU time), {res['speedup_wall']:.3f}x (wall), "
        f"{res['speedup_paired_cpu']:.3f}x (median of step-by-step CPU-time ratios)"
    )
    print(
        f"loss curves ({a.steps} steps, {lb[0]:.3f} -> {lb[-1]:.3f}): new differs from base by at most "
        f"{res['max_loss_gap']:.2e} ({res['max_loss_gap_relative']:.1e} relative; at most "
        f"{max(gaps[: a.steps // 2]):.1e} over the first {a.steps // 2} steps); the control (base from weights x "
        f"(1 + 2^-23)) by at most {res['control_max_loss_gap']:.2e}"
    )
    if a.bf16:
        lf = runs["bf16"][0]["loss"]
        bgaps = [abs(u - v) for u, v in zip(ln, lf)]
        res["bf16"] = dict(
            speedup_over_base_cpu=round(arms["base"]["cpu_s_per_step"] / arms["bf16"]["cpu_s_per_step"], 3),
            speedup_over_base_wall=round(arms["base"]["wall_s_per_step"] / arms["bf16"]["wall_s_per_step"], 3),
            speedup_over_new_cpu=round(arms["new"]["cpu_s_per_step"] / arms["bf16"]["cpu_s_per_step"], 3),
            max_loss_gap_vs_new=max(bgaps),
            max_loss_gap_vs_new_relative=max(g / abs(u) for g, u in zip(bgaps, ln)),
            loss_gap_per_step=[float(f"{g:.3g}") for g in bgaps],
            losses=lf,
        )
        b = res["bf16"]
        print(
            f"bf16 (new + bf16 autocast, attention fp32): {b['speedup_over_base_cpu']:.3f}x over base "
            f"({b['speedup_over_base_wall']:.3f}x wall), {b['speedup_over_new_cpu']:.3f}x over new (CPU time); loss "
            f"differs from new by at most {b['max_loss_gap_vs_new']:.2e} ({b['max_loss_gap_vs_new_relative']:.1e} "
            f"relative), against the float32 rounding control's {res['control_max_loss_gap']:.2e}"
        )
    if a.compile:
        cache = work / "inductor"  # an empty compile cache: the compile time of a fresh machine
        arms2 = {
            "new": (ROOT, False, False, {}),
            "compiled": (ROOT, True, False, {"TORCHINDUCTOR_CACHE_DIR": str(cache)}),
        }
        got = lockstep(arms2, path, a.threads, a.steps, scales)
        n, c = got["new"], got["compiled"]
        steady = {k: float(np.median(got[k]["wall"][WARMUP:])) for k in got}
        steady_cpu = {k: float(np.median(got[k]["cpu"][WARMUP:])) for k in got}
        comp = c["wall"][0] - steady["compiled"]
        gain = steady["new"] - steady["compiled"]
        res["compiled"] = dict(
            compile_wall_s=round(comp, 1),
            compile_cpu_s_this_process=round(c["cpu"][0] - steady_cpu["compiled"], 1),
            wall_s_per_step=round(steady["compiled"], 4),
            cpu_s_per_step=round(steady_cpu["compiled"], 4),
            new_wall_s_per_step=round(steady["new"], 4),
            speedup_over_new_wall=round(steady["new"] / steady["compiled"], 3),
            speedup_over_new_cpu=round(steady_cpu["new"] / steady_cpu["compiled"], 3),
            breakeven_steps=round(comp / gain) if gain > 0 else None,
            max_loss_gap_vs_new=max(abs(u - v) for u, v in zip(c["loss"], n["loss"])),
        )
        k = res["compiled"]
        print(
            f"compiled (new + torch.compile): compile {comp:.1f} s wall, then {steady['compiled']:.3f} s/step wall "
            f"({k['speedup_over_new_wall']:.3f}x over new; {k['speedup_over_new_cpu']:.3f}x in CPU time); pays after "
            f"{k['breakeven_steps']} steps; losses differ from new by at most {k['max_loss_gap_vs_new']:.2e}"
        )
    rp = result_path(a.out, "pretrain_cpu")
    doc = json.loads(rp.read_text()) if rp.exists() else {}
    doc.update(device=device_name(), torch=torch.__version__)
    doc.setdefault("runs", {})[f"{a.threads}_threads"] = res
    write_result(a.out, "pretrain_cpu", doc)


if __name__ == "__main__":
    main()
