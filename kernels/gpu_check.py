"""`make gpu-check`: one command that says, on a machine with one CUDA GPU, whether everything GPU-specific in composer2
works and how fast, in at most 10 minutes; on any other machine a dry run that reaches every step.

    python kernels/gpu_check.py              # CUDA: every step; results in kernels/results/
    python kernels/gpu_check.py --dry        # any machine (the default without CUDA): every step reached, the GPU
                                             # parts skipped with the reason; the summary goes to a temporary directory

Steps, in order (one that fails is recorded with its reason and the next one runs; each has a time budget):

  env       the device, its compute capability, torch / Triton / Lightning versions
  compile   every Triton kernel variant (MXFP8 quantisation, grouped GEMM and weight gradient; NVFP4 quantisation and
            GEMM) built for this device's capability (`composer2.kernels.nvfp4.compile_for`)
  exact     on the device: MXFP8 (floor and rceil, rows and columns) and NVFP4 quantisation by the Triton kernels
            bit-identical to the reference (`backend="torch"`, the OCP / NVFP4 rules), NaN, Inf, zeros and bf16
            subnormals included; the MXFP8 and NVFP4 grouped GEMMs against FP64 products of the dequantised operands
  gemm      `kernels/bench_mxfp8.py --quick --parts gemm moe nvfp4_gemm`: MXFP8 and NVFP4 grouped GEMM and the MoE
            layer against BF16 `torch._grouped_mm` (its own JSON: results/mxfp8_<device>.json)
  pretrain  `c2 train` at the gpu scale for 100 steps on a small corpus: tokens/s and MFU (6 x active parameters +
            attention, against the device's dense bf16 peak)
  decode    `kernels/bench_decode.py` on that checkpoint: MTP speculative decoding at batch 1 and 8 against plain
            decoding (its own JSON: results/decode_<device>.json)
  rl        one `c2 rl` step at the gpu scale from that checkpoint (Ray, the sandboxed harness, the trainer on the GPU)

Writes results/gpu_check_<device>.json (the steps, their status, seconds and numbers) and prints a summary table.
Exit status 1 if a step failed (a skipped step is not a failure). In the dry run every step still does what needs no
GPU: `compile` builds one kernel for sm_90 on the CPU, `gemm` and `decode` check that their scripts take the arguments
this check gives them, `pretrain` and `rl` validate their configuration with `c2 config`."""

import argparse, json, os, platform, re, shutil, subprocess, sys, tempfile, time, traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
BIN = Path(sys.executable).parent
C2 = str(BIN / "c2")
NO_CUDA = "no CUDA device here (torch.cuda.is_available() is False)"
GEMM_PARTS = ["gemm", "moe", "nvfp4_gemm"]
# gpu scale, cut to fit the 10 minutes: a corpus of a few hundred files (the gpu scale's vocabulary), 100 steps
DATA_OVERRIDES = ["data.max_files=300"]
PRETRAIN_OVERRIDES = ["train.steps=100", "train.eval_every=1000", "train.eval_tokens=65536", "pretrain.log_every=10"]
RL_OVERRIDES = [
    "rl.steps=1",
    "rl.prompts_per_step=4",
    "rl.group_size=4",
    "rl.eval_every=1000",
    "rl.eval_at_start=false",
    "rl.eval_prompts=4",
    "rl.eval_k=2",
    "rl.ckpt_every=1",
    "rl.max_new_tokens=128",
]


def device_slug(name: str) -> str:
    "A file-name form of a device name: 'NVIDIA H200' -> 'nvidia-h200'."
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def run(cmd, budget, env=None, cwd=ROOT) -> subprocess.CompletedProcess:
    "Run `cmd` with a time budget (seconds); its output is kept for the record."
    return subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=budget,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def last_lines(r, n=3) -> str:
    return " | ".join((r.stdout + r.stderr).strip().splitlines()[-n:])[-400:]


class Check:
    "The steps' shared state: the device, the dry flag, where things go, what earlier steps produced."

    def __init__(self, dry: bool, out: Path, work: Path):
        import torch

        self.torch, self.dry, self.out, self.work = torch, dry, out, work
        self.cuda = torch.cuda.is_available()
        self.device = torch.cuda.get_device_name(0) if self.cuda else f"CPU {platform.machine()}"
        self.cc = torch.cuda.get_device_capability(0) if self.cuda else None
        self.checkpoint = None  # the pretrain step's final.pt
        self.data = None

    # each step returns a dict of numbers; raising Skip records it as skipped with the reason
    def env(self):
        import torch, triton, lightning

        return dict(
            device=self.device,
            capability=None if self.cc is None else f"sm_{self.cc[0]}{self.cc[1]}",
            torch=torch.__version__,
            triton=triton.__version__,
            lightning=lightning.__version__,
            cuda=torch.version.cuda,
            python=platform.python_version(),
        )

    def compile(self):
        cc = 90 if self.dry else self.cc[0] * 10 + self.cc[1]
        names = ["grouped_mm[fp8,bf16]"] if self.dry else None
        code = (
            "import json, sys\nfrom composer2.kernels.nvfp4 import compile_for\n"
            "print(json.dumps(compile_for(int(sys.argv[1]), json.loads(sys.argv[2]))))"
        )
        r = run([sys.executable, "-c", code, cc, json.dumps(names)], 300, env={"TRITON_INTERPRET": "0"})
        if r.returncode:
            raise RuntimeError(f"compile_for({cc}) failed: {last_lines(r)}")
        times = json.loads(r.stdout.strip().splitlines()[-1])
        res = dict(target=f"sm_{cc}", kernels=len(times), seconds=round(sum(times.values()), 1), each=times)
        if self.dry:
            raise Skip(f"{NO_CUDA}: built {len(times)} variant for sm_90 on the CPU; the device build needs CUDA", res)
        return res

    def exact(self):
        if self.dry:
            raise Skip(NO_CUDA + "; the same comparisons run under the Triton interpreter in nbs/20-22")
        torch = self.torch
        from composer2.kernels.mx_quant import to_mx, from_mx
        from composer2.kernels.mx_gemm import mx_grouped_mm
        from composer2.kernels.nvfp4 import to_nvfp4, from_nvfp4, nvfp4_weights, nvfp4_grouped_mm

        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(4096, 4096, device="cuda", generator=g, dtype=torch.float32) * 3
        x[0, :64] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0] * 16)
        x[1, :32] = 1e-40  # float32 subnormals
        x[2] = 0.0
        xb = x.to(torch.bfloat16)
        xb[3, :32] = torch.tensor(2.0**-130).to(torch.bfloat16)  # bf16 subnormals
        res, bad = {}, []
        for dtype_name, t in [("fp32", x), ("bf16", xb)]:
            for mode in ("floor", "rceil"):
                for dim in (-1, 0):
                    a = to_mx(t, dim=dim, mode=mode, backend="triton")
                    b = to_mx(t, dim=dim, mode=mode, backend="torch")
                    same = torch.equal(a[0].view(torch.uint8), b[0].view(torch.uint8)) and torch.equal(a[1], b[1])
                    res[f"mxfp8 {dtype_name} {mode} dim {dim}"] = same
                    bad += [] if same else [f"mxfp8 {dtype_name} {mode} dim {dim}"]
            a, b = to_nvfp4(t, backend="triton"), to_nvfp4(t, backend="torch")
            same = all(torch.equal(u.view(torch.uint8), v.view(torch.uint8)) for u, v in zip(a[:2], b[:2]))
            same = same and torch.equal(a[2].nan_to_num(-1.0), b[2].nan_to_num(-1.0))
            res[f"nvfp4 {dtype_name}"] = same
            bad += [] if same else [f"nvfp4 {dtype_name}"]
        # grouped GEMMs against FP64 products of the dequantised operands (uneven groups, one empty)
        M, K, N, G = 2048, 1024, 512, 4
        offs = torch.tensor([512, 512, 1280, 2048], dtype=torch.int32, device="cuda")
        a = torch.randn(M, K, device="cuda", generator=g)
        w = torch.randn(G, K, N, device="cuda", generator=g) / K**0.5
        aq, wq = to_mx(a, dim=-1), to_mx(w, dim=1)
        ref = _grouped_ref(from_mx(*aq, dim=-1, dtype=torch.float64), from_mx(*wq, dim=1, dtype=torch.float64), offs)
        got = mx_grouped_mm(aq, wq, offs, out_dtype=torch.float32).double()
        res["mxfp8 grouped_mm max rel err vs FP64"] = float((got - ref).abs().max() / ref.abs().max())
        an, wn = to_nvfp4(a), nvfp4_weights(w)
        ref = _grouped_ref(
            from_nvfp4(*an, dtype=torch.float64), from_nvfp4(*wn, dtype=torch.float64).transpose(1, 2), offs
        )
        got = nvfp4_grouped_mm(an, wn, offs, out_dtype=torch.float32).double()
        res["nvfp4 grouped_mm max rel err vs FP64"] = float((got - ref).abs().max() / ref.abs().max())
        for k in ("mxfp8 grouped_mm max rel err vs FP64", "nvfp4 grouped_mm max rel err vs FP64"):
            if not res[k] < 5e-4:  # FP32 accumulation of exact products (nbs/21-22's TOL32 on a GPU)
                bad.append(k)
        if bad:
            raise RuntimeError(f"not bit-exact / off the FP64 product: {', '.join(bad)}")
        return res

    def gemm(self):
        cmd = [
            sys.executable,
            ROOT / "kernels" / "bench_mxfp8.py",
            "--quick",
            "--parts",
            *GEMM_PARTS,
            "--out",
            self.out,
        ]
        if self.dry:
            r = run([sys.executable, ROOT / "kernels" / "bench_mxfp8.py", "--help"], 120)
            missing = [p for p in GEMM_PARTS + ["--quick", "--out"] if p not in r.stdout]
            if r.returncode or missing:
                raise RuntimeError(f"bench_mxfp8.py does not take {missing or 'its arguments'}: {last_lines(r)}")
            raise Skip(f"{NO_CUDA}; would run: {' '.join(map(str, cmd[1:]))}")
        r = run(cmd, 330)
        if r.returncode:
            raise RuntimeError(f"bench_mxfp8.py failed: {last_lines(r)}")
        path = self.out / f"mxfp8_{device_slug(self.device)}.json"
        return dict(results=str(path), table=[l for l in r.stdout.splitlines() if l.startswith("|")][:40])

    def pretrain(self):
        data, runs = self.work / "data", self.work / "train"
        cfg_args = ["--scale", "gpu", f"data.dir={data}", *DATA_OVERRIDES]
        train_args = ["train", *cfg_args, *PRETRAIN_OVERRIDES, f"train.out={runs}"]
        if self.dry:
            r = run([C2, "config", *cfg_args, *PRETRAIN_OVERRIDES], 120)
            if r.returncode:
                raise RuntimeError(f"c2 config rejects the pretrain step's settings: {last_lines(r)}")
            flops = self._flops_per_token()
            raise Skip(f"{NO_CUDA}; would run: c2 {' '.join(train_args)}", dict(gpu_scale=flops))
        t0 = time.time()
        r = run([C2, "data", "build", *cfg_args], 240)
        if r.returncode:
            raise RuntimeError(f"c2 data build failed: {last_lines(r)}")
        data_s = time.time() - t0
        r = run([C2, *train_args], 300)
        if r.returncode:
            raise RuntimeError(f"c2 train failed: {last_lines(r)}")
        done = json.loads((runs / "done.json").read_text())
        self.checkpoint, self.data = runs / "final.pt", data
        from composer2.model.checkpoint import load_checkpoint
        from composer2.pretrain.stages import flops_per_token, peak_flops

        model, _ = load_checkpoint(self.checkpoint)
        fpt = flops_per_token(model, 1024)
        peak = peak_flops(self.torch.device("cuda"))
        tps = _steady_tokens_per_s(runs) or done["tokens"] / done["seconds"]
        return dict(
            steps=done["steps"],
            tokens=done["tokens"],
            seconds=round(done["seconds"], 1),
            data_build_s=round(data_s, 1),
            tokens_per_s=round(tps),
            mfu=None if peak is None else round(tps * fpt / peak, 4),
            flops_per_token=fpt,
            params=done["params"],
            internal_nll=(done["initial_internal_nll"], done["internal_nll"]),
        )

    def decode(self):
        cmd = [sys.executable, ROOT / "kernels" / "bench_decode.py", "--checkpoint", self.checkpoint or "CKPT"]
        cmd += ["--batch", "1", "8", "--temperature", "0", "1", "--new", "128", "--repeats", "2", "--out", self.out]
        if self.dry:
            r = run([sys.executable, ROOT / "kernels" / "bench_decode.py", "--help"], 120)
            missing = [
                a
                for a in ["--checkpoint", "--batch", "--temperature", "--new", "--repeats", "--out"]
                if a not in r.stdout
            ]
            if r.returncode or missing:
                raise RuntimeError(f"bench_decode.py does not take {missing or 'its arguments'}: {last_lines(r)}")
            raise Skip(f"{NO_CUDA}; would run: {' '.join(map(str, cmd[1:]))}")
        if self.checkpoint is None:
            raise Skip("no checkpoint: the pretrain step did not finish")
        r = run(cmd, 240)
        if r.returncode:
            raise RuntimeError(f"bench_decode.py failed: {last_lines(r)}")
        return dict(table=[l for l in r.stdout.splitlines() if l.startswith("|")])

    def rl(self):
        data = self.data or self.work / "data"
        args = [
            "rl",
            "--scale",
            "gpu",
            f"data.dir={data}",
            *DATA_OVERRIDES,
            *RL_OVERRIDES,
            f"rl.runs={self.work / 'rl'}",
        ]
        init = f"rl.init={self.checkpoint or 'scratch'}"
        if self.dry:
            r = run([C2, "config", *args[1:], "rl.init=scratch"], 120)
            if r.returncode:
                raise RuntimeError(f"c2 config rejects the rl step's settings: {last_lines(r)}")
            raise Skip(f"{NO_CUDA}; would run: c2 {' '.join(args)} rl.init=<the pretrain checkpoint>")
        if self.data is None:
            raise Skip("no data dir: the pretrain step did not finish")
        t0 = time.time()
        r = run([C2, *args, init], 240)
        if r.returncode:
            raise RuntimeError(f"c2 rl failed: {last_lines(r)}")
        done = json.loads(next((self.work / "rl").rglob("done.json")).read_text())
        return dict(seconds=round(time.time() - t0, 1), step_s=done.get("step_s"), init=init.split("=", 1)[1])

    def _flops_per_token(self):
        "The gpu scale's model on the meta device: parameters and training FLOPs per token (no memory, no GPU)."
        import torch
        from composer2.config import load_config
        from composer2.model.moe import MoETransformer
        from composer2.pretrain.stages import flops_per_token

        cfg = load_config("gpu")
        cfg.model.vocab_size = cfg.data.vocab_size
        with torch.device("meta"):
            m = MoETransformer(cfg.model)
        return dict(params=m.param_counts(), flops_per_token=flops_per_token(m, cfg.train.seq_len))


class Skip(Exception):
    "A step that cannot run here: the reason, and what it did do."

    def __init__(self, reason, results=None):
        super().__init__(reason)
        self.results = results or {}


def _grouped_ref(a, w, offs):
    "FP64 grouped product: rows offs[g-1]:offs[g] of a times w[g]."
    out, start = [], 0
    for g, end in enumerate(offs.tolist()):
        out.append(a[start:end] @ w[g])
        start = end
    return __import__("torch").cat(out)


def _steady_tokens_per_s(runs: Path) -> float | None:
    "The median of Lightning's logged train/tokens_per_s (its CSV log), past the first interval (compile, warm-up)."
    vals = []
    for f in runs.glob("logs/*/metrics.csv"):
        lines = f.read_text().splitlines()
        head = lines[0].split(",")
        if "train/tokens_per_s" in head:
            i = head.index("train/tokens_per_s")
            vals += [float(l.split(",")[i]) for l in lines[1:] if len(l.split(",")) > i and l.split(",")[i]]
    vals = sorted(vals[1:])
    return vals[len(vals) // 2] if vals else None


STEPS = ["env", "compile", "exact", "gemm", "pretrain", "decode", "rl"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dry", action="store_true", help="reach every step, skip what needs a GPU (the default without CUDA)"
    )
    ap.add_argument("--out", default=None, help=f"results directory (default {RESULTS}; dry: a temporary one)")
    ap.add_argument("--steps", nargs="+", choices=STEPS, default=STEPS)
    a = ap.parse_args(argv)
    import torch

    dry = a.dry or not torch.cuda.is_available()
    out = Path(a.out or (tempfile.mkdtemp(prefix="gpu-check-") if dry else RESULTS))
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-work-"))
    chk = Check(dry, out, work)
    print(f"gpu-check{' (dry run: ' + NO_CUDA + ')' if dry else ''} on {chk.device}", flush=True)
    t_all, record = time.time(), []
    for name in a.steps:
        t0 = time.time()
        try:
            res, status, reason = getattr(chk, name)(), "ok", ""
        except Skip as e:
            res, status, reason = e.results, "skipped", str(e)
        except subprocess.TimeoutExpired as e:
            res, status, reason = {}, "failed", f"over its time budget of {e.timeout:.0f}s"
        except Exception as e:
            res, status, reason = {}, "failed", f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            traceback.print_exc()
        record.append(dict(step=name, status=status, seconds=round(time.time() - t0, 1), reason=reason, results=res))
        print(f"{name:9s} {status:8s} {time.time() - t0:6.1f}s  {reason or _brief(res)}", flush=True)
    summary = dict(
        device=chk.device,
        dry=dry,
        date=time.strftime("%Y-%m-%d %H:%M:%S"),
        seconds=round(time.time() - t_all, 1),
        steps=record,
    )
    path = out / f"gpu_check_{device_slug(chk.device)}{'_dry' if dry else ''}.json"
    path.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    failed = [r["step"] for r in record if r["status"] == "failed"]
    n = {s: sum(r["status"] == s for r in record) for s in ("ok", "skipped", "failed")}
    print(
        f"gpu-check: {n['ok']} ok, {n['skipped']} skipped, {n['failed']} failed"
        f"{' (' + ', '.join(failed) + ')' if failed else ''} in {summary['seconds']:.0f}s; summary {path}"
    )
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def _brief(res: dict) -> str:
    keys = ["device", "capability", "kernels", "tokens_per_s", "mfu", "step_s"]
    return ", ".join(f"{k} {res[k]}" for k in keys if k in res and res[k] is not None)


if __name__ == "__main__":
    sys.exit(main())
