"""Issue 49's recipe search: train the cpu-scale model from scratch under one arm's recipe (copy-row design, copy share,
loss weights, learning rate) and log in-context copying (`copy_nll`) and code NLL along the way.

    python tools/copy_arms.py ARM [--steps N] [--out DIR]     # resumable: rerun the same command after a kill
    python tools/copy_arms.py ARM --init DIR/OTHER/ckpt.pt --name NAME    # a curriculum: ARM's rows from OTHER's state

Each arm writes DIR/ARM/log.jsonl (one row per evaluation: step, tokens, copy NLL first/repeat of `copy_nll` (a fixed
layout of span 40 and gap 60 until 2026-11-29, varying since), `copy_var` with span and gap varying row by row,
`copy_own` on held-out copy rows of the arm's own design (its row length and spans: in distribution where the others
are not), code val NLL, internal NLL, seconds) and
DIR/ARM/ckpt.pt every `--ckpt` steps. One thread (the machine's other core stays free). A measurement
tool, not the training pipeline: the recipe chosen here goes into `composer2.pretrain`."""

import argparse, json, math, sys, time
from pathlib import Path
import numpy as np
import torch

from composer2.config import load_config
from composer2.data.corpus import open_data
from composer2.model.checkpoint import build_model, copy_nll
from composer2.model.moe import training_loss
from composer2.data.corpus import SPECIAL_TOKENS

# arm: rows of copies (kind, share of rows), weight of copy targets, learning rate; optionally rows a batch and their
# length (rows, T) and the number of ordinary token ids copy rows draw from (vocab)
ARMS = {
    "code": dict(kind=None, share=0.0, lr=3e-3),  # today's base recipe: code only (the control)
    "code-5e-4": dict(kind=None, share=0.0, lr=5e-4),
    "span-masked": dict(kind="span", share=0.5, lr=5e-4),  # random span, gap, span again; loss on the repeat only
    "span-masked-1e-3": dict(kind="span", share=0.5, lr=1e-3),
    "inserted": dict(kind="inserted", share=0.5, lr=5e-4),  # a code row with a span of itself copied further on
    "inserted-weighted": dict(kind="inserted", share=0.5, lr=5e-4, weight=4.0),
    "dense": dict(kind="dense", share=0.5, lr=5e-4),  # many short random spans, each repeated soon after
    "span-pure": dict(kind="span", share=1.0, lr=5e-4),  # copy rows only: does the circuit form at this shape at all?
    "dense-pure": dict(kind="dense", share=1.0, lr=5e-4),  # dense rows only: ~35% of targets predictable by copying
    # 4x the rows at a quarter of the length (the same tokens a step): more copy examples for the same compute
    "short-pure": dict(kind="short", share=1.0, lr=5e-4, rows=32, T=64),
    # the copied tokens drawn from the first 256 ordinary ids only (a minimal GPT learns copying far sooner from 256
    # random tokens than from 4096): the first step of a curriculum over the copied vocabulary
    "short-sub256": dict(kind="short", share=1.0, lr=1e-3, rows=32, T=64, vocab=256),
    "short-1e-3": dict(kind="short", share=1.0, lr=1e-3, rows=32, T=64),  # its control: every id, the same rate
    "short-sub1024": dict(kind="short", share=1.0, lr=1e-3, rows=32, T=64, vocab=1024),  # the next step (--init)
    "self-copy": dict(kind="self", share=0.5, lr=5e-4),  # a code window followed by itself
    # the unembedding tied to the embedding: a head that moves a token's embedding forward then scores that token high
    # for every id at once, where an untied head must learn the identity map id by id (~0.1 examples per id a step)
    "short-tied": dict(kind="short", share=1.0, lr=1e-3, rows=32, T=64, tie=True),
    # tied, at the base's shape: half the rows random span, gap, span (loss on the repeat only), half code; from scratch,
    # or after short-tied (--init): the curriculum
    "span-tied": dict(kind="span", share=0.5, lr=1e-3, tie=True),
}


def copy_row(kind, code, T, g, lo, V):
    "One row of T + 1 tokens and its target weights [T] (1 where a target counts)."
    r = lambda a, b: int(torch.randint(a, b, (1,), generator=g))
    w = torch.ones(T)
    if kind in ("span", "short"):  # random tokens: span, gap, span again; only the repeat is predictable
        s = r(16, 64) if kind == "span" else r(8, 24)
        gap = r(4, T + 1 - 2 * s)
        a = torch.randint(lo, V, (s,), generator=g)
        row = torch.cat([a, torch.randint(lo, V, (gap,), generator=g), a])
        row = torch.cat([row, torch.randint(lo, V, (T + 1 - len(row),), generator=g)])
        w.zero_()
        w[s + gap : 2 * s + gap - 1] = 1  # targets at positions predicting the repeat's tokens 2..s
        return row, w
    o = r(0, len(code) - T - 2)
    row = torch.from_numpy(code[o : o + T + 1].astype(np.int64)).clone()
    if kind == "inserted":  # a span of the row copied over a later part of it
        s = r(16, 48)
        a = r(0, T // 2 - s)
        b = r(a + s + 4, T + 1 - s)
        row[b : b + s] = row[a : a + s].clone()
        return row, w
    if kind == "self":  # a half window, then itself
        h = (T + 1) // 2
        row = torch.cat([row[:h], row[:h], row[: T + 1 - 2 * h]])
        return row, w
    if kind == "dense":  # short random spans each repeated after a short gap; loss on the repeats only
        row, w, i = torch.randint(lo, V, (T + 1,), generator=g), torch.zeros(T), 0
        while True:
            s, gap = r(4, 12), r(0, 12)
            if i + 2 * s + gap > T:
                break
            row[i + s + gap : i + 2 * s + gap] = row[i : i + s]
            w[i + s + gap : i + 2 * s + gap - 1] = 1
            i += 2 * s + gap
        return row, w
    raise ValueError(kind)


def copy_var(model, V, lo, n=16, seed=0):
    """NLL of the repeat (its 11th token on) when span and gap vary row by row (span 20-60, gap 10-120): a model that
    copies by content scores it as `copy_nll`'s fixed layout; one that learnt to attend a fixed distance back does
    not."""
    g = torch.Generator().manual_seed(seed)
    was = model.training
    model.eval()
    out = []
    with torch.no_grad():
        for _ in range(n):
            s, gap = int(torch.randint(20, 61, (1,), generator=g)), int(torch.randint(10, 121, (1,), generator=g))
            a = torch.randint(lo, V, (s,), generator=g)
            x = torch.cat([a, torch.randint(lo, V, (gap,), generator=g), a])[None]
            nll = torch.nn.functional.cross_entropy(model(x).logits[0, :-1], x[0, 1:], reduction="none")
            out.append(nll[s + gap + 9 :].mean().item())
    model.train(was)
    return sum(out) / n


def code_nll(model, toks, T, n=64, seed=1):
    "Mean NLL per token of n fixed windows of T tokens."
    g = torch.Generator().manual_seed(seed)
    o = torch.randint(0, len(toks) - T - 1, (n,), generator=g).tolist()
    x = torch.stack([torch.from_numpy(toks[i : i + T + 1].astype(np.int64)) for i in o])
    was = model.training
    model.eval()
    with torch.no_grad():
        nll = sum(
            torch.nn.functional.cross_entropy(
                model(x[i : i + 16, :-1]).logits.transpose(1, 2), x[i : i + 16, 1:]
            ).item()
            for i in range(0, n, 16)
        )
    model.train(was)
    return nll / math.ceil(n / 16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("arm", choices=sorted(ARMS))
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--ckpt", type=int, default=200)
    ap.add_argument("--out", default="runs/copy_arms")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--init", help="start from this arm checkpoint (weights and optimizer state; a curriculum's switch)"
    )
    ap.add_argument("--name", help="the run's directory name (default: the arm's)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    arm = ARMS[a.arm]
    cfg = load_config(scale="cpu")
    cfg.model.tie_embeddings = arm.get("tie", False)
    data = open_data(cfg)
    V, T, B = data.vocab_size, arm.get("T", cfg.train.seq_len), arm.get("rows", cfg.train.batch_size)
    code, val, internal = data.tokens("code_train"), data.tokens("code_val"), data.internal_tokens()
    torch.manual_seed(0)
    model = build_model(cfg, V)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [dict(params=decay, weight_decay=0.1), dict(params=rest, weight_decay=0.0)], lr=arm["lr"], betas=(0.9, 0.95)
    )
    warm = 100
    lr_at = lambda s: arm["lr"] * min(1.0, (s + 1) / warm)  # constant after warmup: the phase change is what we time
    out = Path(a.out) / (a.name or a.arm)
    out.mkdir(parents=True, exist_ok=True)
    log, ck, step = out / "log.jsonl", out / "ckpt.pt", 0
    if ck.exists():
        st = torch.load(ck, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step = st["step"]
        rows = [json.loads(l) for l in log.read_text().splitlines()]
        log.write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= step))
    elif a.init:  # the switch of a curriculum: weights and Adam's moments kept, the warmup run again
        st = torch.load(a.init, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
    lo = len(SPECIAL_TOKENS)
    t0 = time.time()
    n_copy = round(B * arm["share"])  # the first n_copy rows of a batch are copy rows

    def batch(seed):
        "The arm's batch of step `seed`: rows [B, T + 1] and target weights [B, T]."
        g = torch.Generator().manual_seed(seed)
        rows, ws = [], []
        for i in range(B):
            if i >= n_copy:
                o = int(torch.randint(0, len(code) - T - 2, (1,), generator=g))
                rows.append(torch.from_numpy(code[o : o + T + 1].astype(np.int64)))
                ws.append(torch.ones(T))
            else:
                r, w = copy_row(arm["kind"], code, T, g, lo, min(V, lo + arm.get("vocab", V)))
                rows.append(r)
                ws.append(w * arm.get("weight", 1.0))
        return torch.stack(rows), torch.stack(ws)

    def own_copy():
        "Loss on the copy targets of held-out copy rows of the arm's own design (in distribution: length, spans)."
        if not n_copy:
            return None
        b, m = batch(10**6)
        was = model.training
        model.eval()
        with torch.no_grad():
            lg = model(b[:n_copy, :-1]).logits
        model.train(was)
        nll = torch.nn.functional.cross_entropy(lg.transpose(1, 2), b[:n_copy, 1:], reduction="none")
        return float((nll * m[:n_copy]).sum() / m[:n_copy].sum())

    def evaluate():
        c = copy_nll(model, V)
        row = dict(
            step=step,
            tokens=step * B * T,
            copy_first=c["first"],
            copy_repeat=c["repeat"],
            copy_var=copy_var(model, V, lo),
            copy_own=own_copy(),
            code_val=code_nll(model, val, T),
            internal=code_nll(model, internal, T, n=32),
            s=time.time() - t0,
        )
        with open(log, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    if step == 0:
        evaluate()
    while step < a.steps:
        b, m = batch(step)
        for p in opt.param_groups:
            p["lr"] = lr_at(step)
        parts = training_loss(model, b[:, :-1], b[:, 1:], m, with_mtp=False)
        opt.zero_grad(set_to_none=True)
        parts["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.update_router_biases()
        step += 1
        if step % a.eval_every == 0:
            evaluate()
        if step % a.ckpt == 0 or step == a.steps:
            torch.save(dict(model=model.state_dict(), opt=opt.state_dict(), step=step), str(ck) + ".tmp")
            Path(str(ck) + ".tmp").replace(ck)


if __name__ == "__main__":
    sys.exit(main())
