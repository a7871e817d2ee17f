"""Decode throughput with and without MTP speculative decoding, measured side by side in one run.

    python kernels/bench_decode.py --checkpoint runs/cpu/final.pt [--batch 1 8] [--new 128] [--temperature 0 1]

Prompts are windows of the internal codebase when the checkpoint's data dir is built here, else the token file
given with --prompts (a torch tensor [n, len]). Results are printed as a table and written as JSON to
kernels/results/decode_<device>.json."""

import argparse, json, platform, re, sys, time
from pathlib import Path
import torch
from omegaconf import OmegaConf
from composer2.core import C2Error
from composer2.config import Config
from composer2.model.engine import Engine
from composer2.model.checkpoint import load_checkpoint


def device_name(dev):
    return (
        torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else f"cpu {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"
    )


def prompts_from(args, ck, n, length):
    if args.prompts:
        return torch.load(args.prompts)[:, :length]
    from composer2.data.corpus import open_data

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.create(ck["config"])))
    toks = torch.from_numpy(open_data(cfg).internal_tokens().astype("int64"))
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(toks) - length, (n,), generator=g)
    return torch.stack([toks[s : s + length] for s in starts])


def timed(engine, prompts, dev, **kw):
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    gens, st = engine.generate(prompts, **kw)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t, sum(len(g.tokens) for g in gens), st


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--prompts", default=None, help="a saved LongTensor [n, len] of prompt tokens")
    ap.add_argument(
        "--save-prompts", default=None, help="write the prompts used to this file (to carry to another machine)"
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--new", type=int, default=128, help="new tokens per row")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model, ck = load_checkpoint(a.checkpoint, device=dev)
        prompts = prompts_from(a, ck, max(a.batch), a.prompt_len)
    except C2Error as e:
        sys.exit(f"bench_decode: error: {e}")
    if a.save_prompts:
        torch.save(prompts, a.save_prompts)
    engine = Engine(model)
    name = device_name(dev)
    print(
        f"device: {name}   model: {model.param_counts()['total']:,} params, mtp_depth={model.cfg.mtp_depth}   torch {torch.__version__}"
    )
    rows = []
    for T in a.temperature:
        for B in a.batch:
            p = prompts[:B].tolist()
            kw = dict(max_new_tokens=a.new, temperature=T, stop_ids=(), seed=0)
            timed(engine, p, dev, **kw)
            timed(engine, p, dev, speculative=True, **kw)  # warm-up
            res = {}
            for spec in (False, True):  # interleaved repeats, best of n
                res[spec] = min(
                    (timed(engine, p, dev, speculative=spec, **kw) for _ in range(a.repeats)), key=lambda r: r[0]
                )
            (tp, n_p, _), (ts, n_s, st) = res[False], res[True]
            rows.append(
                dict(
                    temperature=T,
                    batch=B,
                    plain_tok_s=n_p / tp,
                    spec_tok_s=n_s / ts,
                    speedup=(n_s / ts) / (n_p / tp),
                    acceptance=st.acceptance,
                    tokens_per_forward=st.tokens_per_forward,
                )
            )
    print(
        f"{'temp':>5} {'batch':>5} {'plain tok/s':>12} {'MTP-spec tok/s':>15} {'speedup':>8} {'accept':>7} {'tok/fwd':>8}"
    )
    for r in rows:
        print(
            f"{r['temperature']:>5} {r['batch']:>5} {r['plain_tok_s']:>12.1f} {r['spec_tok_s']:>15.1f} {r['speedup']:>7.2f}x "
            f"{r['acceptance']:>7.2f} {r['tokens_per_forward']:>8.2f}"
        )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]
    path = out / f"decode_{slug}.json"
    path.write_text(
        json.dumps(
            dict(
                device=name,
                torch=torch.__version__,
                checkpoint=str(a.checkpoint),
                new_tokens=a.new,
                prompt_len=a.prompt_len,
                params=model.param_counts(),
                results=rows,
            ),
            indent=1,
        )
        + "\n"
    )
    print(f"written: {path}")


if __name__ == "__main__":
    main()
