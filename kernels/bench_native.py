"""composer2.kernels.native's CPU kernels against PyTorch, side by side: a decode step's attention, its routed experts, the whole step.

    python kernels/bench_native.py [--checkpoint runs/.../sft/final.pt] [--rows 40] [--positions 480 560] [--reps 40]

1. **One layer's attention** of one query per row (6 query heads over 2 key heads of 32 dimensions, the cpu scale) over
   `--rows` rows of `--positions` cached slots, as a rollout's decode step has them: `decode_attention` on keys
   [B, Hkv, S, D] (views of a pool, the layout before tiles), its PyTorch twin on tiled keys [B, Hkv, tiles, D, 32]
   (`composer2.kernels.native._tiled_torch`, what runs without a C compiler) and the native kernel (`tiled_decode_attention`).
   Eight layers' caches are cycled, so that every call reads its keys from memory and not from the CPU's caches, as
   in a real step, where four layers' caches (46 MB) pass through a 32 MB L3. Also timed: reading the same bytes
   (`sum`), the memory floor.
2. **One MoE layer's routed experts** (16 experts of 192 -> 2 x 128 -> 192, top-2: the cpu scale) for 1 to 256 tokens:
   `MoE._grouped` (the sort, the two `torch._grouped_mm` calls, the gating and the scatter) against the native kernel
   (`moe_experts`), with eight layers' weights cycled so that they come from memory, as in a step. Where the kernel stops
   winning is `composer2.kernels.native.EXPERT_ROWS`.
3. **A decode step of the model** (the checkpoint's, else the cpu-scale model at random init) on a `SlotCache` with the
   same rows: both kernels, each alone, and neither (`native_off()`).

One torch thread (the rollout loop's). Medians of `--reps` calls, interleaved; the JSON goes to
kernels/results/native_<device>.json.
"""

import argparse, sys, time
from contextlib import contextmanager
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_rollout import device_name, write_result


def medians(fns: dict, reps: int) -> dict:
    "Median seconds per call of each function, interleaved so that drift hits every one alike."
    t = {k: [] for k in fns}
    for _ in range(reps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            t[k].append(time.perf_counter() - t0)
    return {k: sorted(v)[len(v) // 2] for k, v in t.items()}


def bench_layer(args) -> dict:
    from composer2.model.kvcache import decode_attention
    from composer2.kernels.native import TILE, _tiled_torch, native_status, tiled_decode_attention

    B, H, Hkv, D, L = args.rows, 6, 2, 32, 8
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(args.positions[0], args.positions[1] + 1, (B,), generator=g)
    S, cap = int(lens.max()), 1024
    mask = (torch.arange(S)[None] < lens[:, None])[:, None, None]
    q = torch.randn(B, H, 1, D, generator=g)
    plain = [(torch.randn(B, Hkv, cap, D, generator=g), torch.randn(B, Hkv, cap, D, generator=g)) for _ in range(L)]
    # the same keys in tiles (the values' layout does not change)
    tiled = [k.view(B, Hkv, cap // TILE, TILE, D).transpose(3, 4).contiguous() for k, _ in plain]
    fns = {
        "plain_torch": lambda: [decode_attention(q, k[:, :, :S], v[:, :, :S], mask) for k, v in plain],
        "tiled_torch": lambda: [_tiled_torch(q, kt, v, mask) for kt, (_, v) in zip(tiled, plain)],
        "read_floor": lambda: [(k[:, :, :S].sum(), v[:, :, :S].sum()) for k, v in plain],
    }
    if native_status()["available"]:
        fns["native"] = lambda: [tiled_decode_attention(q, kt, v, mask) for kt, (_, v) in zip(tiled, plain)]
    ms = {k: 1e3 * s / L for k, s in medians(fns, args.reps).items()}
    ref = decode_attention(q, plain[0][0][:, :, :S], plain[0][1][:, :, :S], mask)
    gaps = {"tiled_torch": float((_tiled_torch(q, tiled[0], plain[0][1], mask) - ref).abs().max())}
    if "native" in ms:
        gaps["native"] = float((tiled_decode_attention(q, tiled[0], plain[0][1], mask) - ref).abs().max())
    mb = 2 * B * Hkv * S * D * 4 / 1e6
    return dict(
        rows=B,
        slots=S,
        mean_len=float(lens.float().mean()),
        mb_per_layer=mb,
        ms_per_layer=ms,
        gb_per_s={k: mb / v for k, v in ms.items()},
        max_abs_gap_to_plain=gaps,
    )


def bench_experts(args) -> dict:
    from composer2.config import load_config
    from composer2.model.moe import MoE, Routing
    from composer2.kernels.native import EXPERT_ROWS, moe_experts, native_status

    mcfg = load_config("cpu").model
    g = torch.Generator().manual_seed(2)
    layers = []
    for _ in range(8):
        m = MoE(mcfg).eval()
        for p in m.parameters():
            p.requires_grad_(False)
        layers.append(m)
    E, k, d = mcfg.n_experts, mcfg.top_k, mcfg.d_model
    out = {}
    for n in args.tokens:
        x = torch.randn(n, d, generator=g)
        idx = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(n)])
        r = Routing(idx, torch.rand(n, k, generator=g), torch.zeros(n, E))
        fns = {"grouped_mm": lambda: [m._grouped(x, r) for m in layers]}
        if native_status()["available"] and n <= EXPERT_ROWS:
            fns["native"] = lambda: [moe_experts(x, r.idx, r.weights, m.w_in, m.w_out) for m in layers]
        ms = {key: 1e3 * v / len(layers) for key, v in medians(fns, args.reps).items()}
        row = dict(ms_per_layer=ms)
        if "native" in ms:
            row["speedup"] = ms["grouped_mm"] / ms["native"]
            row["max_abs_gap"] = float(
                (moe_experts(x, r.idx, r.weights, layers[0].w_in, layers[0].w_out) - layers[0]._grouped(x, r))
                .abs()
                .max()
            )
        out[str(n)] = row
    mb = sum(p.numel() for p in (layers[0].w_in, layers[0].w_out)) * 4 / 1e6
    return dict(mb_per_layer=mb, expert_rows=EXPERT_ROWS, tokens=out)


def bench_step(args) -> dict:
    from composer2.config import load_config
    from composer2.model.moe import MoETransformer
    import composer2.model.kvcache as kv, composer2.kernels.native as nat
    from composer2.kernels.native import native_off, native_status

    if args.checkpoint:
        from composer2.model.checkpoint import load_checkpoint

        model, _ = load_checkpoint(args.checkpoint)
    else:
        cfg = load_config("cpu")
        model = MoETransformer(load_config("cpu", overrides=[f"model.vocab_size={cfg.data.vocab_size}"]).model)
    model.eval()
    B = args.rows
    g = torch.Generator().manual_seed(1)
    lens = torch.randint(args.positions[0], args.positions[1] + 1, (B,), generator=g)
    pool = model.new_cache(B, capacity=1024, slots=True)
    for t in pool.kt + pool.v:
        t.normal_(generator=g)
    cur = torch.randint(0, model.cfg.vocab_size, (B, 1), generator=g)

    def step():
        pool.len[:] = lens
        with torch.no_grad():
            return model(cur, cache=pool.view(range(B))).logits

    def off():
        with native_off():
            return step()

    def attention_only():  # the experts' kernel declines every batch
        with patched(nat, "EXPERT_ROWS", 0):
            return step()

    def experts_only():  # `SlotCache` attention takes the kernel's PyTorch twin (on its rows, gathered)
        with patched(kv, "tiled_decode_attention", nat._tiled_torch):
            return step()

    fns = (
        {"native": step, "attention_only": attention_only, "experts_only": experts_only, "torch": off}
        if native_status()["available"]
        else {"torch": step}
    )
    ms = {k: 1e3 * s for k, s in medians(fns, args.reps).items()}
    out = dict(ms_per_step=ms)
    if "native" in ms:
        out["speedup"] = ms["torch"] / ms["native"]
        out["max_abs_logit_gap"] = float((step() - off()).abs().max())
    return out


@contextmanager
def patched(module, name: str, value):
    "Inside: `module.name` is `value` (one kernel off while the other stays on)."
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--checkpoint", help="a composer2 checkpoint for the decode-step part (default: cpu-scale random init)"
    )
    ap.add_argument("--rows", type=int, default=40)
    ap.add_argument(
        "--positions", type=int, nargs=2, default=[480, 560], metavar=("MIN", "MAX"), help="cached slots per row"
    )
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument(
        "--tokens",
        type=int,
        nargs="+",
        default=[1, 8, 24, 40, 64, 96, 128, 192, 256],
        help="token counts of the experts part",
    )
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    args = ap.parse_args()
    if args.checkpoint and not Path(args.checkpoint).is_file():
        raise SystemExit(f"bench_native: error: no checkpoint at {args.checkpoint}")
    torch.set_num_threads(1)
    from composer2.kernels.native import native_status

    res = dict(device=device_name(), torch=torch.__version__, native=native_status(), checkpoint=args.checkpoint)
    res["layer"] = bench_layer(args)
    l = res["layer"]
    print(
        f"one layer's decode attention, {l['rows']} rows x {l['slots']} slots ({l['mb_per_layer']:.1f} MB of keys and values), "
        f"ms per layer (GB/s):"
    )
    for k, v in l["ms_per_layer"].items():
        print(f"  {k:12s} {v:6.3f} ms  ({l['gb_per_s'][k]:5.1f} GB/s)")
    res["experts"] = bench_experts(args)
    e = res["experts"]
    print(f"one MoE layer's routed experts ({e['mb_per_layer']:.1f} MB of weights), ms per layer:")
    for n, row in e["tokens"].items():
        print(
            f"  {n:>4s} tokens  "
            + "  ".join(f"{k} {v:6.3f}" for k, v in row["ms_per_layer"].items())
            + (f"  ({row['speedup']:.2f}x, gap {row['max_abs_gap']:.1e})" if "speedup" in row else "")
        )
    res["step"] = bench_step(args)
    s = res["step"]
    print(
        "decode step of the model: "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in s["ms_per_step"].items())
        + (f": native {s['speedup']:.2f}x (logits within {s['max_abs_logit_gap']:.1e})" if "speedup" in s else "")
    )
    write_result(args.out, "native", res)


if __name__ == "__main__":
    main()
