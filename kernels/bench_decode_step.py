"""Where one decode step of the rollout path goes, against the memory it must read: the floor no fusion can pass.

    python kernels/bench_decode_step.py --checkpoint runs/.../sft/final.pt [--rows 24] [--cached 500] [--steps 40]

One decode step as `DecodeServer` runs it (`MoETransformer.forward` of one token per row over a `SlotCache` pool, one
torch thread, the native kernels where built): `rows` sequences, each with `cached` positions in its cache. Timed whole,
then with the three native calls timed apart (`tiled_decode_attention`, `moe_experts`, `store_kv`); the rest is
PyTorch (projections, norms, RoPE, router, head) and Python. Against it: the bytes a step must read (every layer's
keys and values of every row, the weights a step touches: the trunk's, the experts any row routed to, the tied head)
at the read bandwidth measured here on a buffer as large (a plain `sum`). Results are printed and written as JSON to
kernels/results/decode_step_<device>.json. Not the sampler (one `multinomial` a step) and not the prefills."""

import argparse, collections, json, os, platform, time
from pathlib import Path
import torch

ROOT = Path(__file__).resolve().parents[1]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--rows", type=int, default=24)
    ap.add_argument("--cached", type=int, default=500)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", default=str(ROOT / "kernels" / "results"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    import composer2.model.kvcache as K, composer2.model.moe as M
    from composer2.kernels.native import native_status
    from composer2.model.checkpoint import load_checkpoint

    m, _ = load_checkpoint(a.checkpoint)
    m.eval()
    B, L = a.rows, a.cached
    pool = m.new_cache(B, capacity=L + a.steps + 8, slots=True)
    rows = list(range(B))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        at = torch.zeros(B, L, dtype=torch.bool)
        at[:, -1] = True
        idx = torch.randint(5, m.cfg.vocab_size, (B, L), generator=g)
        m(idx, valid=torch.ones(B, L, dtype=torch.bool), cache=pool.view(rows), capture=True, logits_at=at)
        cur = torch.randint(5, m.cfg.vocab_size, (B, 1), generator=g)
        routed = [set() for _ in m.moe_layers]

        def step():
            out = m(cur, cache=pool.view(rows), capture=True)
            for j, s in enumerate(routed):
                s.update(out.experts[:, 0, j].reshape(-1).tolist())
            pool.len[:] = L  # every step at the same cache length

        for _ in range(5):
            step()
        whole = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            step()
            whole.append(time.perf_counter() - t0)
        parts, calls = collections.Counter(), {}
        native = [(K, "tiled_decode_attention"), (K, "store_kv"), (M, "moe_experts")]  # each timed where it is called
        for mod, name in native:
            f = calls[name] = getattr(mod, name)

            def timed(*args, _f=f, _n=name, **kw):
                t = time.perf_counter()
                r = _f(*args, **kw)
                parts[_n] += time.perf_counter() - t
                return r

            setattr(mod, name, timed)
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        split_total = (time.perf_counter() - t0) / a.steps
        for mod, name in native:
            setattr(mod, name, calls[name])
    c = m.cfg
    kv_bytes = c.n_layers * B * 2 * c.n_kv_heads * L * c.head_dim * 4
    per_expert = sum(p.numel() for p in (m.moe_layers[0].w_in[0], m.moe_layers[0].w_out[0])) * 4
    # the trunk without the routed experts and the MTP module; the embedding counted once (it is the tied head, read
    # whole; the lookup reads B rows)
    trunk = sum(
        p.numel() for n, p in m.named_parameters() if not n.endswith(("ffn.w_in", "ffn.w_out")) and "mtp" not in n
    )
    w_bytes = trunk * 4 + per_expert * sum(len(s) for s in routed)
    buf = torch.randn((kv_bytes + w_bytes) // 4)
    for _ in range(3):
        buf.sum()
    t0 = time.perf_counter()
    for _ in range(10):
        buf.sum()
    gbs = buf.numel() * 4 * 10 / (time.perf_counter() - t0) / 1e9
    step_s = median(whole)
    floor_s = (kv_bytes + w_bytes) / (gbs * 1e9)
    res = dict(
        device=f"cpu {platform.processor() or platform.machine()} ({os.cpu_count()} cores), 1 thread",
        native=native_status()["available"],
        rows=B,
        cached=L,
        step_ms=step_s * 1e3,
        split_step_ms=split_total * 1e3,
        parts_ms={k: v / a.steps * 1e3 for k, v in parts.items()},
        rest_ms=(split_total - sum(parts.values()) / a.steps) * 1e3,
        kv_mb=kv_bytes / 1e6,
        weights_mb=w_bytes / 1e6,
        experts_routed=[len(s) for s in routed],
        read_gb_s=gbs,
        floor_ms=floor_s * 1e3,
        headroom=step_s / floor_s,
    )
    print(
        f"{B} rows x {L} cached positions, one thread: {res['step_ms']:.2f} ms a step (median of {a.steps}); with the "
        f"native calls timed apart {res['split_step_ms']:.2f} ms: "
        + ", ".join(f"{k} {v:.2f}" for k, v in res["parts_ms"].items())
        + f", PyTorch and Python {res['rest_ms']:.2f}"
    )
    print(
        f"reads {res['kv_mb']:.1f} MB of keys and values and {res['weights_mb']:.1f} MB of weights at "
        f"{gbs:.1f} GB/s: floor {res['floor_ms']:.2f} ms, the step is {res['headroom']:.2f}x it"
    )
    out = Path(a.out) / f"decode_step_cpu-{platform.machine()}-{os.cpu_count()}-cores.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
