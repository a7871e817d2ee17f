"""`ChatPolicy` (any HF chat model through its own chat template, text in and out) against composer2's engine on the
same weights, in the agent harness: how many episodes come out identical at temperature 0, and the wall time of each.

    python kernels/bench_chat_policy.py --checkpoint runs/studies/best_of_k/KEY/cpu/sft/final.pt [-n 144] [--scale cpu] [--set k=v ...]

The checkpoint is exported with `composer2.interop.hf.export_hf` (our tokenizer and chat template) into a temporary HF
directory; both paths then run the same held-out tasks, one sample each, greedy: the engine through
`rollout.evaluate_checkpoint` (token ids throughout), `ChatPolicy` through `hf.evaluate_chat` (the transcript re-rendered
as text by the chat template every turn, the reply decoded to text). Episodes can differ only where re-encoding the
decoded text does not give back the sampled ids. Use a checkpoint that writes tool calls (an SFT or RL policy) and the
task settings it was trained for (`--set`, as `c2` overrides). The JSON goes to kernels/results/chat_policy_<device>.json."""

import argparse, json, platform, tempfile, time
from pathlib import Path
import torch
from composer2.config import load_config
from composer2.data.corpus import open_data
from composer2.interop.hf import evaluate_chat, export_hf
from composer2.rl.rollout import evaluate_checkpoint
from composer2.tasks.suites import load_suite
from composer2.model.checkpoint import load_checkpoint

# the best_of_k study's task and sampler settings (its SFT checkpoint was trained for these)
BEST_OF_K = [
    "tasks.suite=synthetic",
    "tasks.n_files=1",
    "tasks.n_distractors=0",
    "tasks.max_turns=6",
    "rl.max_new_tokens=96",
    "rl.max_seq_len=1024",
    "pretrain.mtp_from=small",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--scale", default="cpu")
    ap.add_argument("-n", type=int, default=144, help="held-out tasks (one sample each)")
    ap.add_argument(
        "--set", nargs="*", default=BEST_OF_K, help="config overrides (default: the best_of_k study's tasks)"
    )
    a = ap.parse_args()
    cfg = load_config(a.scale, overrides=[*a.set, "rl.temperature=0"])
    data = open_data(cfg)
    tasks = load_suite(cfg, "eval", a.n)
    hf_dir = Path(tempfile.mkdtemp()) / "hf"
    export_hf(load_checkpoint(a.checkpoint)[0], hf_dir, data)
    t = time.perf_counter()
    ours = evaluate_checkpoint(cfg, data, a.checkpoint, tasks, 1)
    t_engine = time.perf_counter() - t
    t = time.perf_counter()
    chat = evaluate_chat(cfg, hf_dir, tasks, 1)
    t_chat = time.perf_counter() - t
    outcome = lambda r: {
        k: v for k, v in r.items() if k != "prefill"
    }  # prefill is each path's own (the chat path re-encodes)
    same = [outcome(x) == outcome(y) for x, y in zip(ours, chat)]
    total = lambda res, key: sum(sum(r[key]) for r in res)
    out = dict(
        device=f"cpu {platform.machine()} ({torch.get_num_threads()} threads)"
        if not torch.cuda.is_available()
        else torch.cuda.get_device_name(),
        torch=torch.__version__,
        checkpoint=a.checkpoint,
        settings=a.set,
        tasks=len(tasks),
        identical=sum(same),
        solved=dict(engine=total(ours, "solved"), chat=total(chat, "solved")),
        turns=dict(engine=total(ours, "turns"), chat=total(chat, "turns")),
        seconds=dict(engine=round(t_engine, 1), chat=round(t_chat, 1)),
        prefill_tokens=dict(engine=total(ours, "prefill"), chat=total(chat, "prefill")),
        differ=[
            dict(
                task=x["task"],
                engine=dict(turns=x["turns"], tokens=x["tokens"], solved=x["solved"]),
                chat=dict(turns=y["turns"], tokens=y["tokens"], solved=y["solved"]),
            )
            for x, y, s in zip(ours, chat, same)
            if not s
        ],
    )
    print(
        f"{out['identical']} of {out['tasks']} episodes identical; solved {out['solved']['engine']} (engine) vs {out['solved']['chat']} "
        f"(ChatPolicy); turns {out['turns']['engine']} vs {out['turns']['chat']}; {t_engine:.0f} s vs {t_chat:.0f} s"
    )
    res = (
        Path(__file__).parent
        / "results"
        / f"chat_policy_{'cpu-' + platform.machine() if not torch.cuda.is_available() else 'gpu'}.json"
    )
    res.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written {res}")


if __name__ == "__main__":
    main()
