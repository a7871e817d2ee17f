"""Decode throughput of composer2's `Engine.generate` and rollout `DecodeServer` against Hugging Face `generate()` on the same weights, side by side in one run.

    python kernels/bench_hf_decode.py --checkpoint runs/cpu/final.pt [--batch 1 8 32] [--new 64] [--temperature 0 1]
    python kernels/bench_hf_decode.py --random [--scale cpu] [--set model.gate=sigmoid]   # no checkpoint: random weights

The HF model is `composer2.interop.hf.to_hf(model)` (Ernie4_5_MoeForCausalLM or Glm4MoeForCausalLM; fp32 logits equal to
composer2's within ~1e-5). Both decode with a KV cache from the same equal-length prompts (random tokens) and generate
exactly --new tokens per row: the engine with no stop tokens, HF with min_new_tokens = max_new_tokens and no eos
token. `DecodeServer` (the RL rollout path: continuous batching, one request per row from its own thread) is timed on
the same prompts. The engine also records what RL needs per token (log-probability, routing, weight version); HF returns the
tokens only. Throughput is best of --repeats interleaved runs after a warm-up. At temperature 0 the table also
reports the share of rows whose greedy tokens agree (the same function, so ~all). Results are printed as a table and
written as JSON to kernels/results/hf_decode_<device>.json."""

import argparse, json, re, sys, time
from pathlib import Path
import torch
from composer2.core import C2Error
from composer2.config import load_config
from composer2.model.moe import MoETransformer
from composer2.model.engine import DecodeServer, Engine
from concurrent.futures import ThreadPoolExecutor
from composer2.interop.hf import to_hf
from composer2.model.checkpoint import load_checkpoint
from bench_decode import device_name  # same directory: one device naming for every benchmark


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run_engine(engine, x, new, temperature, dev):
    "Seconds, tokens generated, tokens [B, new]."
    sync(dev)
    t = time.perf_counter()
    gens, _ = engine.generate(x.tolist(), max_new_tokens=new, temperature=temperature, stop_ids=(), seed=0)
    sync(dev)
    dt = time.perf_counter() - t
    return dt, sum(len(g.tokens) for g in gens), [g.tokens for g in gens]


def run_server(model, x, new, temperature, dev):
    "Seconds, tokens generated, tokens [B, new]: every row a request of its own, as rollout episodes ask."
    srv = DecodeServer(Engine(model), temperature=temperature, seed=0, rows=len(x))

    def one(p):
        sid = srv.open()
        g = srv.generate(sid, p, new, stop_ids=())
        srv.close(sid)
        return g.tokens

    sync(dev)
    t = time.perf_counter()
    with ThreadPoolExecutor(len(x)) as ex:
        toks = list(ex.map(one, x.tolist()))
    sync(dev)
    dt = time.perf_counter() - t
    srv.shutdown()
    return dt, sum(map(len, toks)), toks


def run_hf(hf, x, new, temperature, dev):
    "Seconds, tokens generated, tokens [B, new]."
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    torch.manual_seed(0)
    sync(dev)
    t = time.perf_counter()
    out = hf.generate(
        x, attention_mask=torch.ones_like(x), max_new_tokens=new, min_new_tokens=new, use_cache=True, **kw
    )
    sync(dev)
    dt = time.perf_counter() - t
    toks = out[:, x.shape[1] :]
    return dt, toks.numel(), toks.tolist()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="a composer2 checkpoint (composer2.model.checkpoint.load_checkpoint)")
    src.add_argument("--random", action="store_true", help="random weights at --scale (when no checkpoint exists)")
    ap.add_argument("--scale", default="cpu", help="the scale of --random's model")
    ap.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="config overrides of --random's model, e.g. model.gate=sigmoid",
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--new", type=int, default=64, help="new tokens per row")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    import transformers

    transformers.logging.set_verbosity_error()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        if a.random:
            cfg = load_config(a.scale, overrides=a.set)
            cfg.model.vocab_size = cfg.model.vocab_size or cfg.data.vocab_size
            torch.manual_seed(a.seed)
            model, source = (
                MoETransformer(cfg.model).to(dev),
                f"random weights, {a.scale} scale{''.join(' ' + o for o in a.set)}, seed {a.seed}",
            )
        else:
            model, _ = load_checkpoint(a.checkpoint, device=dev)
            source = str(a.checkpoint)
        model = model.float().eval()
        hf = to_hf(model, eos_id=None)  # no eos: HF cannot stop early, as the engine with stop_ids=()
    except C2Error as e:
        sys.exit(f"bench_hf_decode: error: {e}")
    engine = Engine(model)
    g = torch.Generator().manual_seed(a.seed)
    prompts = torch.randint(2, model.cfg.vocab_size, (max(a.batch), a.prompt_len), generator=g).to(dev)
    name = device_name(dev)
    print(f"device: {name}   torch {torch.__version__}   transformers {transformers.__version__}")
    print(
        f"model: {source}, {model.param_counts()['total']:,} params, gate={model.cfg.gate} -> {type(hf).__name__} "
        f"(experts: {hf.config._experts_implementation}, attention: {hf.config._attn_implementation})"
    )
    rows = []
    for T in a.temperature:
        for B in a.batch:
            x = prompts[:B]
            run_engine(engine, x, a.new, T, dev)
            run_hf(hf, x, a.new, T, dev)  # warm-up
            res = {"engine": [], "hf": [], "server": []}
            for _ in range(a.repeats):  # interleaved, best of n
                res["engine"].append(run_engine(engine, x, a.new, T, dev))
                res["hf"].append(run_hf(hf, x, a.new, T, dev))
                res["server"].append(run_server(model, x, a.new, T, dev))
            (te, ne, toks_e), (th, nh, toks_h), (ts, ns, _) = (
                min(res[k], key=lambda r: r[0]) for k in ("engine", "hf", "server")
            )
            assert ne == nh == ns == B * a.new, (ne, nh, ns)
            r = dict(
                temperature=T,
                batch=B,
                engine_tok_s=ne / te,
                server_tok_s=ns / ts,
                hf_tok_s=nh / th,
                ratio=(ne / te) / (nh / th),
                server_ratio=(ns / ts) / (nh / th),
            )
            if T == 0:
                r["same_tokens"] = sum(p == q for p, q in zip(toks_e, toks_h)) / B
            rows.append(r)
            print(
                f"  temp {T} batch {B}: engine {r['engine_tok_s']:.1f} tok/s, server {r['server_tok_s']:.1f}, HF {r['hf_tok_s']:.1f}",
                flush=True,
            )
    print(
        f"\n{'temp':>5} {'batch':>5} {'engine tok/s':>13} {'server tok/s':>13} {'HF tok/s':>10} {'engine/HF':>10} {'server/HF':>10} {'greedy rows equal':>18}"
    )
    for r in rows:
        same = f"{r['same_tokens']:.0%}" if "same_tokens" in r else "-"
        print(
            f"{r['temperature']:>5} {r['batch']:>5} {r['engine_tok_s']:>13.1f} {r['server_tok_s']:>13.1f} {r['hf_tok_s']:>10.1f} "
            f"{r['ratio']:>9.2f}x {r['server_ratio']:>9.2f}x {same:>18}"
        )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40]
    path = out / f"hf_decode_{slug}.json"
    path.write_text(
        json.dumps(
            dict(
                device=name,
                torch=torch.__version__,
                transformers=transformers.__version__,
                model=source,
                hf_class=type(hf).__name__,
                experts_implementation=hf.config._experts_implementation,
                attn_implementation=hf.config._attn_implementation,
                threads=torch.get_num_threads(),
                new_tokens=a.new,
                prompt_len=a.prompt_len,
                repeats=a.repeats,
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
