"""Red-team tests of deep trees (issue: the host's recursive walks). One `mkdir -p` of 1,000 levels inside the sandbox,
or one write_file call with a 3,000-part path, made every later `Sandbox.run`, the judge and the episode's final read
raise `RecursionError` (`os.fwalk`, `shutil.rmtree` recurse once per level) and each walk hold a descriptor per level;
an episode that raised was left out of its RL group, so the failing rollout escaped its reward. Real sandbox, judge,
tools, episode loop and `Rollouts` (its decode server replaced by a scripted one); no mocks of what is under test."""

import os, resource, shutil, subprocess, sys
from pathlib import Path
import pytest
import torch
from composer2.config import load_config
from composer2.sandbox.host import BWRAP_MISSING
from composer2.model.engine import Generation, stream_key
from composer2.agent.episode import read_workspace, run_episode
from composer2.tasks.judge import Verdict, judge, judge_spec
from composer2.sandbox.paths import MAX_WALK_DEPTH, Walk, list_beneath, workspace_digest
from composer2.agent.protocol import format_tool_call
from composer2.rl.rollout import Rollouts
from composer2.sandbox.bwrap import Sandbox
from composer2.tasks.synthetic import synthetic_suite
from composer2.agent.tools import Toolbox
from composer2.sandbox.workspace import default_root, give_to_sandbox, make_workspace, remove_workspace

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING)
CFG = load_config("smoke")
MKDIR_1000 = 'mkdir -p $(python3 -c \'print("/".join(["d"] * 1000))\') && echo made'
DEEP_3000 = "/".join(["d"] * 3000) + "/x.py"


def calls(*cs):
    return "".join(format_tool_call(n, a) for n, a in cs)


def nfds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Scripted:
    "A policy that writes the given turns, then finishes."

    def __init__(self, turns):
        self.turns = list(turns)

    def act(self, transcript, toolbox):
        return self.turns.pop(0) if self.turns else format_tool_call("finish", {"message": "done"})


@pytest.fixture(scope="module")
def syn():
    "A synthetic task with two test scripts."
    return next(t for t in synthetic_suite(CFG.tasks, "train", 40) if len(judge_spec(t)["tests"]) >= 2)


@pytest.fixture(params=["tmpfs", "plain"])
def limits(request):
    "The workspace as a tmpfs of its own (as root) and as a plain directory (removed by walking, not unmounted)."
    if request.param == "tmpfs":
        return CFG.sandbox
    return load_config("smoke", overrides=["sandbox.workspace_mb=0"]).sandbox


def check_harness_survives(task, ws, sb):
    "After a deep tree: commands run, the judge judges (unsolved), the final read and the digest return, removal works."
    assert sb.run("echo still here").stdout == "still here\n"
    v = judge(task, ws, sb)
    assert isinstance(v, Verdict) and not v.solved
    files = read_workspace(ws)
    assert set(task.files) <= set(files)
    assert workspace_digest(ws) is None  # deeper than the walk goes: not summarised
    assert not [p for p in list_beneath(ws, hidden=True) if p.count("/") >= MAX_WALK_DEPTH]
    remove_workspace(ws)
    assert not ws.exists()


def test_a_1000_level_directory_made_in_the_sandbox(syn, limits):
    ws = make_workspace(syn.files, limits=limits)
    try:
        sb = Sandbox(ws, limits)
        r = sb.run(MKDIR_1000)
        assert r.stdout == "made\n", r
        assert (ws / "/".join(["d"] * 100)).is_dir()
        check_harness_survives(syn, ws, sb)
    finally:
        remove_workspace(ws)


def test_a_3000_part_path_written_by_a_tool(syn, limits):
    ws = make_workspace(syn.files, limits=limits)
    try:
        sb = Sandbox(ws, limits)
        tb = Toolbox(ws, sb)
        (res,) = tb.step(calls(("write_file", {"path": DEEP_3000, "content": "x = 1\n"})))
        assert res.ok, res
        (res,) = tb.step(calls(("read_file", {"path": DEEP_3000})))
        assert res.ok and "x = 1" in res.output, res
        check_harness_survives(syn, ws, sb)
    finally:
        remove_workspace(ws)


@pytest.mark.parametrize(
    "turn",
    [calls(("shell", {"command": MKDIR_1000})), calls(("write_file", {"path": DEEP_3000, "content": "x = 1\n"}))],
)
def test_deep_trees_through_an_episode(syn, turn):
    "The whole episode: it returns, judged and unsolved, and its workspace is gone; the next episode runs as usual."
    before = set(default_root().glob("ws-*"))
    ep = run_episode(syn, Scripted([turn]), CFG)
    assert ep.stop_reason == "finish" and not ep.solved and ep.verdict is not None and ep.reward.correct == 0
    assert set(default_root().glob("ws-*")) <= before, "a workspace was left behind"
    assert run_episode(syn, Scripted([]), CFG).stop_reason == "finish"


def _chain(path: Path, depth: int):
    "`depth` nested directories under `path`, made by descriptor (no path grows past PATH_MAX), a file at the end."
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        new = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = new
    os.close(os.open("x.py", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)


def test_walks_hold_a_bounded_number_of_descriptors(tmp_path):
    "950 levels: os.fwalk held ~950 descriptors per walk; every host walk now holds a handful, however deep."
    ws = make_workspace({"a.py": "x = 1\n"})
    try:
        _chain(ws, 950)
        n0, most = nfds(), 0
        for _ in Walk(ws, max_depth=10_000):
            most = max(most, nfds())
        assert most <= n0 + 12 and nfds() == n0, (n0, most)
        # the same walks in a process allowed 200 descriptors in all (the old ones failed there with EMFILE)
        code = (
            f"import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))\n"
            f"from composer2.sandbox.paths import Walk, list_beneath, workspace_digest\n"
            f"from composer2.sandbox.workspace import give_to_sandbox, remove_workspace\n"
            f"ws = {str(ws)!r}\n"
            f"print(sum(1 for _ in Walk(ws, max_depth=10_000)), list_beneath(ws), workspace_digest(ws) is None,\n"
            f"      workspace_digest(ws, max_depth=10_000) is not None)\n"
            f"give_to_sandbox(ws)\n"
        )
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout == "951 ['a.py'] True True\n", r.stderr[-2000:]
    finally:
        remove_workspace(ws)
    assert not ws.exists() and nfds() == n0


def test_removal_of_a_3000_level_tree_in_a_plain_directory(tmp_path):
    "Removal has no depth cap (everything goes), no recursion and a bounded number of descriptors."
    plain = load_config("smoke", overrides=["sandbox.workspace_mb=0"]).sandbox
    ws = make_workspace({"a.py": "x = 1\n"}, limits=plain)
    _chain(ws, 3000)
    give_to_sandbox(ws)
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(nfds() + 16, 64), old[1]))
    try:
        remove_workspace(ws)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    assert not ws.exists()


# ---- through Rollouts: a failing rollout keeps its reward in its group


class ScriptServer:
    """A `DecodeServer` stand-in: sequence opened on stream `s` writes `scripts[s]` turn by turn (then finishes), each
    turn encoded with the real tokenizer, so `EnginePolicy` decodes back exactly that text."""

    def __init__(self, data, scripts: dict):
        self.data, self.scripts, self.turns = data, scripts, {}
        self.summary_end = data.encode("<|/summary|>")[0]

    def open(self, stream=None) -> int:
        sid = len(self.turns)
        self.turns[sid] = list(self.scripts.get(stream, []))
        return sid

    def close(self, sid):
        pass

    def generate(self, sid, new, max_new_tokens, stop_ids=(1,), reset=False) -> Generation:
        if stop_ids[0] == self.summary_end:
            text = "summary"
        elif self.turns[sid]:
            text = self.turns[sid].pop(0)
        else:
            text = format_tool_call("finish", {"message": "done"})
        toks = self.data.encode(text) + [stop_ids[0]]
        experts = torch.zeros(len(new) + len(toks) - 1, 1, 1, dtype=torch.long)  # one routing row per fed position
        return Generation(toks, [0.0] * len(toks), [0] * len(toks), experts, "stop")


@pytest.fixture(scope="module")
def data():
    from composer2.data.corpus import build_data

    return build_data(CFG, progress=False)


def test_a_deep_tree_rollout_stays_in_its_group_with_an_unsolved_reward(syn, data, monkeypatch):
    attack = calls(("shell", {"command": MKDIR_1000}))
    honest = calls(("shell", {"command": "ls"}))
    keys = [stream_key("train", CFG.rl.seed, syn.id, j) for j in range(3)]
    unsolved = run_episode(syn, Scripted([attack]), CFG)  # the same calls outside RL: judged, unsolved
    assert unsolved.stop_reason == "finish" and not unsolved.solved and unsolved.reward.correct == 0

    ro = Rollouts(None, data, CFG, server=ScriptServer(data, {keys[0]: [attack], keys[1]: [honest], keys[2]: [honest]}))
    g = ro.group(syn, 3, version=0)
    assert len(g.rollouts) == 3 and ro.errors == 0 and ro.episodes == 3
    assert g.rollouts[0].reward == unsolved.reward.total and not g.rollouts[0].solved

    # and if the host still fails at what a policy did (here the final read raises, as it did on such a tree), the
    # episode is failed, not dropped: the group keeps its size and the rollout gets that same unsolved reward
    import composer2.agent.episode as episode

    real = episode.read_workspace

    def failing(ws):
        if (Path(ws) / "d").exists():
            raise RecursionError("maximum recursion depth exceeded")
        return real(ws)

    monkeypatch.setattr(episode, "read_workspace", failing)
    ro = Rollouts(None, data, CFG, server=ScriptServer(data, {keys[0]: [attack], keys[1]: [honest], keys[2]: [honest]}))
    g = ro.group(syn, 3, version=0)
    assert len(g.rollouts) == 3 and ro.errors == 0 and ro.episodes == 3
    assert g.rollouts[0].reward == unsolved.reward.total and not g.rollouts[0].solved
    ep = run_episode(syn, Scripted([attack]), CFG)
    assert ep.stop_reason == "error" and ep.test_output == "error: RecursionError: maximum recursion depth exceeded"
    assert ep.reward.total == unsolved.reward.total
