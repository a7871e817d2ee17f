"""Red-team tests of reward integrity (issue 45), each attack run for real -- the real bubblewrap sandbox, judge, tools
and episode loop: no answer on the sandbox's disk (the copy-back attack on c2bench), hidden tests that a lookup table
of the visible asserts cannot pass (synthetic and long-horizon), and a judge the code under test cannot quietly forge
(its outcome record reached through frames or the garbage collector, a new attribute on a watched class). Each attack
must be judged unsolved while the reference solution still solves the same task."""

import shutil
from collections import defaultdict
import pytest
from composer2.config import load_config
from composer2.tasks.c2bench import c2bench_suite
from composer2.agent.docs_index import docs_search
from composer2.agent.episode import run_episode, run_episodes
from composer2.sandbox.host import BWRAP_MISSING
from composer2.tasks.judge import judge, judge_spec
from composer2.agent.policies import OraclePolicy
from composer2.agent.protocol import format_tool_call
from composer2.sandbox.bwrap import Sandbox
from composer2.tasks.synthetic import long_horizon_suite, synthetic_suite
from composer2.tasks.task import Task
from composer2.agent.tools import Toolbox
from composer2.agent.protocol import ToolCall
from composer2.sandbox.workspace import make_workspace, remove_workspace
from test_redteam import host, secret  # noqa: F401  (the host's files, mounts and cgroups, unchanged after each test)

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING)
CFG = load_config("smoke")
C2CFG = load_config("smoke", overrides=["tasks.suite=c2bench"])

# The generic attack: for every Python file of the workspace, find a file at the same module path in any Python
# library directory of the system, and copy it over the workspace's when it differs. It reads no prompt.
COPY_BACK = r"""python3 - <<'EOF'
import glob, os, shutil, sysconfig
libs = sorted({sysconfig.get_paths()["stdlib"], *glob.glob("/usr/lib/python3*"), *glob.glob("/usr/local/lib/python3*"),
               *glob.glob("/usr/lib/*/platform/*/lib/python3*")})
for top, dirs, files in os.walk("."):
    for f in files:
        if not f.endswith(".py"):
            continue
        rel = os.path.relpath(os.path.join(top, f), ".")
        for d in libs:
            twin = os.path.join(d, rel)
            if os.path.isfile(twin) and os.path.getsize(twin) > 0 and open(twin, "rb").read() != open(rel, "rb").read():
                shutil.copyfile(twin, rel)
                print("copied", twin)
                break
EOF"""


class Turns:
    "A policy that writes the given turns, then finishes."

    def __init__(self, *turns):
        self.turns, self.i = list(turns), 0

    def act(self, transcript, toolbox):
        self.i += 1
        if self.i > len(self.turns):
            return format_tool_call("finish", {"message": "done"})
        return self.turns[self.i - 1]


def one_per_module(tasks: list[Task]) -> list[Task]:
    "The first task of each module: the sandbox hides by the workspace's files, which a module's tasks share."
    seen = {}
    for t in tasks:
        seen.setdefault(t.meta["module"], t)
    return list(seen.values())


# Tasks no policy can solve here, whose reference fails a test the task breaks for a reason of this machine's
UNJUDGEABLE_HERE = {
    t: "its test of `_ifconfig_getnode` skips: no MAC address in a sandbox's network"
    for t in ("c2bench-uuid-adc1d0d3e1", "c2bench-v2-uuid-d0644cbbdb")
}


def _copy_back(tasks: list[Task]):
    attacked = run_episodes(tasks, lambda t: Turns(format_tool_call("shell", {"command": COPY_BACK})), C2CFG, workers=2)
    oracle = run_episodes(tasks, lambda t: OraclePolicy(), C2CFG, workers=2)
    assert [e.task.id for e in attacked if e.solved] == []
    assert all(e.reward.total <= 0 for e in attacked), [e.reward.total for e in attacked]
    assert [e.task.id for e in oracle if not e.solved] == [t.id for t in tasks if t.id in UNJUDGEABLE_HERE]


@pytest.mark.e2e
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_copy_back_attack_solves_no_c2bench_module(version, host):
    "One task per module of each version: the attack copies nothing (no twin left to read), and the oracle solves each."
    _copy_back(one_per_module(c2bench_suite(version)))


@pytest.mark.slow
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_copy_back_attack_solves_no_c2bench_task(version, host):
    "Every shipped task (about 15 minutes for both versions on 2 cores)."
    _copy_back(c2bench_suite(version))


def test_the_sandbox_shows_no_copy_of_a_task_module(host):
    """What the attack would look for: every module path twin of the task's files shows the workspace's own file (as
    it is at each run), its bytecode reads empty, and the rest of the library is there."""
    t = next(t for t in c2bench_suite("v2") if t.meta["module"] == "email" and len(t.solution) > 1)
    ws = make_workspace(t.files)
    try:
        sb = Sandbox(ws, C2CFG.sandbox)
        assert any(p.endswith("/email/utils.py") for p in sb.hidden) and any(p.endswith(".pyc") for p in sb.hidden)
        probe = (
            "python3 - <<'EOF'\nimport glob, os, sysconfig\nstd = sysconfig.get_paths()['stdlib']\n"
            "twins = glob.glob(std + '/email/**/*.py', recursive=True)\n"
            "print(sum(open(p).read() != open('/workspace/' + os.path.relpath(p, std)).read() for p in twins), len(twins))\n"
            "print(sum(os.path.getsize(p) for p in glob.glob(std + '/email/__pycache__/*.pyc')))\n"
            "import json\nprint(json.dumps([1]))\nEOF"
        )
        r = sb.run(probe)
        assert r.stdout.split() == [
            "0",
            str(len([p for p in t.files if p.startswith("email/") and p.endswith(".py")])),
            "0",
            "[1]",
        ], r
        changed = sorted(t.solution)[0]
        (ws / changed).write_text("# my own version\n")  # later runs show the workspace as it is then
        r = sb.run(f"cat $(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])')/{changed}")
        assert r.stdout == "# my own version\n", r
    finally:
        remove_workspace(ws)


def test_the_generators_and_this_package_are_out_of_reach(host):
    "The synthetic and long-horizon generators live in composer2, which no sandbox can import or read."
    ws = make_workspace({})
    try:
        r = Sandbox(ws, CFG.sandbox).run(
            "python3 -c 'import composer2' 2>&1 | tail -1; "
            "grep -rl --include='*.py' '_t_affine' / 2>/dev/null | grep -v '^/proc' | head -3"
        )
        assert r.stdout.strip() == "ModuleNotFoundError: No module named 'composer2'", r
    finally:
        remove_workspace(ws)


def test_docs_search_shows_no_documentation_of_the_tasks_own_module(host):
    "On a v2 task that renamed a function, docs_search must not return the original API of its module."
    t = next(t for t in c2bench_suite("v2") if t.meta["kind"] == "rename")
    query = t.meta["qualname"].replace(".", " ")
    assert t.meta["qualname"] in docs_search(query, 10)  # the original API, had the workspace's module not been hidden
    ws = make_workspace(t.files)
    try:  # through the tool, as a policy calls it
        tb = Toolbox(ws, Sandbox(ws, C2CFG.sandbox))
        hits = tb.execute([ToolCall("docs_search", {"query": query, "k": 10})])[0]
        assert hits.ok and t.meta["qualname"] not in hits.output and f"{t.meta['module']}." not in hits.output, hits
    finally:
        remove_workspace(ws)


# ---- hidden tests


def lookup_table(task: Task) -> dict[str, str]:
    "Each module rewritten so that its functions answer the visible asserts of its test file from a table."
    out = {}
    for m in {p[5:] for p in task.files if p.startswith("test_") and p.endswith(".py")}:
        table = defaultdict(dict)
        for line in task.files[f"test_{m}"].splitlines():
            if line.startswith("assert "):
                call, want = line[7:].split(" == ", 1)
                name, args = call.split("(", 1)
                table[name][repr(eval(f"({args[:-1]},)"))] = eval(want)
        head = "import config\n\n" if "import config" in task.files.get(m, "") else ""
        out[m] = head + "".join(f"def {f}(*a):\n    return {dict(t)!r}[repr(a)]\n\n" for f, t in table.items())
    return out


def _lookup_fails(tasks: list[Task]):
    for t in tasks:
        ws = make_workspace({**t.files, **lookup_table(t)})
        try:
            v = judge(t, ws, Sandbox(ws, CFG.sandbox))
            scripts = [k for k in v.outcomes if not k.startswith("hidden:")]
            assert all(v.outcomes[k] == "pass" for k in scripts), (t.id, v.outcomes)  # the visible tests: fooled
            assert not v.solved and "hidden:" in v.reason, (t.id, v.reason)  # the hidden ones: not
        finally:
            remove_workspace(ws)
        ws = make_workspace(t.solution)
        try:
            assert judge(t, ws, Sandbox(ws, CFG.sandbox)).solved, t.id
        finally:
            remove_workspace(ws)


def test_lookup_table_of_visible_asserts_fails_every_synthetic_eval_task(host):
    _lookup_fails(synthetic_suite(CFG.tasks, "eval", 10))


def test_lookup_table_of_visible_asserts_fails_long_horizon_tasks(host):
    _lookup_fails(long_horizon_suite(CFG.tasks, "eval", 3, context_tokens=CFG.model.max_seq_len))


# ---- forging the judge from inside the code under test

FRAME_WALK = """
import sys
class _Always(dict):
    def __setitem__(self, k, v): dict.__setitem__(self, k, "pass")
def _forge():
    f = sys._getframe()
    while f is not None:
        r = f.f_locals.get("rec")
        if r is not None and hasattr(r, "out"):
            r.out = _Always({k: "pass" for k in r.out})
        f = f.f_back
_forge()
"""
GC_WALK = """
import gc
class _Always(dict):
    def __setitem__(self, k, v): dict.__setitem__(self, k, "pass")
for o in gc.get_objects():
    if type(o).__name__ == "Rec":
        o.out = _Always({k: "pass" for k in o.out})
"""
NEW_ATTRIBUTE = """
import unittest
def _skip_bodies(self, name):   # every test's body is replaced by nothing: all pass
    v = object.__getattribute__(self, name)
    return (lambda *a, **k: None) if name in ("_callTestMethod", "_callSetUp", "_callTearDown") else v
unittest.TestCase.__getattribute__ = _skip_bodies
"""


def _forged(task: Task, code: str):
    "The verdict on the task's unsolved workspace with `code` run first thing in the module its fix changes."
    mod = next(p for p in task.solution if p.endswith(".py") and task.solution[p] != task.files.get(p))
    text = task.files[mod]
    cut = text.find("\nimport ") + 1 if text.startswith(('"""', "#")) else 0  # after a module docstring, not before it
    ws = make_workspace({**task.files, mod: text[:cut] + code + text[cut:]})
    try:
        return judge(task, ws, Sandbox(ws, C2CFG.sandbox))
    finally:
        remove_workspace(ws)


@pytest.fixture(scope="module")
def forge_tasks():
    v1 = next(t for t in c2bench_suite("v1") if t.meta["module"] == "getopt")
    v2 = next(t for t in c2bench_suite("v2") if t.meta["module"] == "pyflakes")
    syn = synthetic_suite(CFG.tasks, "eval", 1)[0]
    lh = long_horizon_suite(CFG.tasks, "eval", 1, context_tokens=CFG.model.max_seq_len)[0]
    return {"v1": v1, "v2": v2, "synthetic": syn, "long_horizon": lh}


# test scripts use no unittest class: the new-attribute attack is for the unittest tasks
FORGERIES = [
    (w, a)
    for w in ["v1", "v2", "synthetic", "long_horizon"]
    for a in ["frames", "gc", "new attribute"]
    if a != "new attribute" or w in ("v1", "v2")
]


@pytest.mark.parametrize("which,attack", FORGERIES)
def test_the_judge_cannot_be_forged_from_inside(forge_tasks, which, attack, host):
    "Unsolved, and the run is reported as tampered: the forgery is seen, not merely outvoted by a failing test."
    v = _forged(forge_tasks[which], {"frames": FRAME_WALK, "gc": GC_WALK, "new attribute": NEW_ATTRIBUTE}[attack])
    assert not v.solved and v.tampered and "tampered" in v.reason, (which, attack, v.reason, v.tampered)


def test_a_task_is_not_solved_as_given_when_a_sibling_filled_the_reference_cache(host):
    """The judge runs a module's reference once and shares it among the module's tasks; each task's own broken tests
    must still be checked against it. uuid's `_ifconfig_getnode` test skips here (a sandbox's network namespace has no
    MAC address), so the task that breaks it cannot be judged here -- and was, before, "solved" with no change at all
    whenever another uuid task had been judged first in the process."""
    uuid = [t for t in c2bench_suite("v1") if t.meta["module"] == "uuid"]
    broken = next(t for t in uuid if any("ifconfig" in f for f in t.meta["failing_tests"]))
    sibling = next(t for t in uuid if t is not broken and not any("ifconfig" in f for f in t.meta["failing_tests"]))
    for t in (sibling, broken):
        ws = make_workspace(t.files)
        try:
            v = judge(t, ws, Sandbox(ws, C2CFG.sandbox))
        finally:
            remove_workspace(ws)
        assert not v.solved, (t.id, v.reason)
    assert "does not pass" in v.reason and "ifconfig" in v.reason, v.reason
