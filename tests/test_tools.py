"""The agent harness against its real parts: the parser fuzzed with hypothesis, transcripts round-tripping through the
smoke tokenizer, a whole bug-fixing episode in a bubblewrap sandbox scored by the real reward (real ruff), path
escapes made from inside the sandbox, and semantic search over real standard-library code."""

import shutil, sysconfig, time
from pathlib import Path
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from composer2.config import load_config
from composer2.data.corpus import SPECIAL_TOKENS, open_data
from composer2.agent.rewards import Effort, compute_reward, effort_from_transcript
from composer2.sandbox.bwrap import Sandbox
from composer2.sandbox.host import SandboxUnavailable, bwrap_path
from composer2.sandbox.workspace import make_workspace, remove_workspace
from composer2.agent.protocol import (
    END_THINK,
    SYSTEM_PROMPT,
    THINK,
    TOOL_CALL,
    TOOLS,
    Message,
    ToolCall,
    Transcript,
    format_tool_call,
    parse_tool_calls,
    parse_turn,
)
from composer2.agent.search import SemanticIndex
from composer2.agent.tools import Toolbox

# ---- strategies
TOKENISH = SPECIAL_TOKENS + ["<|", "|>", "{", "}", "[", "]", '"', ":", ",", "\\", "\n", "null", "true"]
texty = st.lists(st.one_of(st.text(max_size=10), st.sampled_from(TOKENISH)), max_size=14).map("".join)
VALUES = {
    "string": texty,
    "integer": st.integers(-(2**40), 2**40),
    "number": st.one_of(st.integers(-9, 9), st.floats(1e-3, 1e3)),
    "array[string]": st.lists(texty, max_size=3),
    "array[integer]": st.lists(st.integers(0, 50), max_size=3),
}


@st.composite
def calls(draw):
    spec = draw(st.sampled_from(list(TOOLS.values())))
    return spec.name, {p.name: draw(VALUES[p.type]) for p in spec.params if p.required or draw(st.booleans())}


def mutate(d, s: str) -> str:
    "Cut, duplicate, swap or insert anywhere in `s`."
    for _ in range(d.draw(st.integers(1, 4))):
        i = d.draw(st.integers(0, len(s)))
        j = d.draw(st.integers(i, len(s)))
        s = d.draw(
            st.sampled_from(
                [s[:i] + s[j:], s[:j] + s[i:j] + s[j:], s[i:j] + s[:i] + s[j:], s[:i] + d.draw(texty) + s[i:]]
            )
        )
    return s


# ---- the parser
@settings(max_examples=250, deadline=None)
@given(st.lists(calls(), min_size=1, max_size=4), st.data())
def test_parser_never_raises_on_mutated_calls(cs, d):
    text = mutate(d, "".join(format_tool_call(n, a) for n, a in cs))
    items = parse_turn(text)
    good, bad = parse_tool_calls(text)
    assert len(good) + len(bad) == len(items) and all(isinstance(e, str) and e.startswith("tool call ") for e in bad)


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parser_never_raises_on_any_text(text):
    good, bad = parse_tool_calls(text)
    assert not good or TOOL_CALL in text


@settings(max_examples=200, deadline=None)
@given(
    st.lists(calls(), max_size=5),
    st.lists(st.sampled_from(["", " ", "\n", "ok. ", f"{THINK}hm{END_THINK}"]), min_size=6, max_size=6),
)
def test_valid_calls_round_trip(cs, fill):
    text = fill[0] + "".join(format_tool_call(n, a) + fill[i + 1] for i, (n, a) in enumerate(cs))
    good, bad = parse_tool_calls(text)
    assert bad == [] and [(c.name, c.arguments) for c in good] == cs


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_toolbox_counts_what_it_was_given(tmp_path, d):
    "Any mutated turn: one result per block, and the counters add up; nothing raises."
    tb = Toolbox(tmp_path)
    cs = d.draw(st.lists(calls().filter(lambda c: c[0] not in ("shell", "semantic_search")), max_size=3))
    text = mutate(d, "".join(format_tool_call(n, a) for n, a in cs)) if cs else d.draw(texty)
    results = tb.step(text)
    assert len(results) == len(parse_turn(text)) == tb.n_calls
    assert (
        tb.n_malformed == sum(r.name == "invalid" for r in results)
        and tb.n_failed == sum(not r.ok for r in results) - tb.n_malformed
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=60), st.text(min_size=1, max_size=8), st.text(max_size=8))
def test_edit_file_is_an_exact_unique_replace(tmp_path, content, search, replace):
    (tmp_path / "f.txt").write_text(content, newline="")
    tb = Toolbox(tmp_path)
    r = tb.execute([ToolCall("edit_file", {"path": "f.txt", "search": search, "replace": replace})])[0]
    after = (tmp_path / "f.txt").read_bytes().decode()
    if content.count(search) == 1:
        assert r.ok and after == content.replace(search, replace)
    else:
        assert not r.ok and after == content and ("not found" in r.output or "appears" in r.output)


# ---- transcripts
@pytest.fixture(scope="module")
def data(smoke_data):
    return open_data(load_config("smoke", overrides=[f"data.dir={smoke_data}"]))


def test_transcripts_round_trip(data):
    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.tuples(
                st.sampled_from(["system", "user", "assistant", "tool_result", "summary"]), st.one_of(texty, st.text())
            ),
            max_size=8,
        )
    )
    def check(msgs):
        t = Transcript([Message(r, x) for r, x in msgs])
        ids, mask = t.render(data)
        assert Transcript.from_ids(ids, data) == t and len(ids) == len(mask)
        assert all(
            m == 0 for i, m in zip(ids, mask) if i in (2, 3, 4, 7, 8)
        )  # headers and result wrappers are never trained on

    check()


# ---- an episode in the sandbox
@pytest.fixture
def sandboxed():
    try:
        bwrap_path()
    except SandboxUnavailable as e:
        pytest.skip(str(e))
    files = {
        "shop/cart.py": "def total(prices, discount=0.0):\n    return sum(prices) * (1 + discount)\n",
        "shop/__init__.py": "",
        "test_cart.py": "from shop.cart import total\nassert total([10, 10], 0.5) == 10\nprint('ok')\n",
    }
    ws = make_workspace(files)
    yield ws, files
    remove_workspace(ws)


def test_episode_fixes_a_bug_and_is_scored(sandboxed, data):
    ws, files = sandboxed
    tb = Toolbox(ws, Sandbox(ws))
    t = Transcript().add("system", SYSTEM_PROMPT).add("user", "The cart total is wrong with a discount.")
    turns = [
        f"{THINK}Run the test and read the code together.{END_THINK}"
        + format_tool_call("shell", {"command": "python3 test_cart.py"})
        + format_tool_call("read_file", {"path": "shop/cart.py"})
        + format_tool_call("todo", {"add": ["fix total", "rerun the test"]}),
        format_tool_call("edit_file", {"path": "shop/cart.py", "search": "(1 + discount)", "replace": "(1 - discount)"})
        + format_tool_call("shell", {"command": "python3 test_cart.py"})
        + format_tool_call("todo", {"complete": [1, 2]}),
        format_tool_call("finish", {"message": "total() added the discount instead of subtracting it; fixed."}),
    ]
    for turn in turns:
        t.add("assistant", turn).add_results(tb.step(turn))
    assert "AssertionError" in t[3].text and t[4].text.startswith("shop/cart.py (lines 1-2 of 2)")
    assert t[8].text == "exit code 0\nok" and tb.finished and all(x["done"] for x in tb.todos)
    assert (tb.n_calls, tb.n_malformed, tb.n_failed) == (7, 0, 0) and tb.edited_files == {"shop/cart.py"}
    solved = Sandbox(ws).run("python3 test_cart.py").returncode == 0
    effort = effort_from_transcript(t, tb, data)
    assert (
        effort.turns == 3 and effort.tool_calls == 7 and effort.thinking_tokens > 0 and effort.final_message_tokens > 0
    )
    b = compute_reward(solved, tb, ws, effort, load_config("smoke"), files)
    assert b.correct == 1.0 and b.as_dict()["n_style"] == 0 and b.malformed == b.failed == b.unfinished_todos == 0
    assert b.length_penalty < 0 and b.total == pytest.approx(1.0 + b.length_penalty)
    # the same fix written sloppily through the shell: style and reasoning comments cost, and so do open to-dos
    tb2 = Toolbox(ws, Sandbox(ws))
    tb2.step(
        format_tool_call("todo", {"add": ["tidy"]})
        + format_tool_call(
            "shell",
            {
                "command": "printf 'import os\\n# I think we need to subtract here\\n' | cat - shop/cart.py > x && mv x shop/cart.py"
            },
        )
    )
    b2 = compute_reward(solved, tb2, ws, None, load_config("smoke"), files)
    assert b2.counts["style"] == 1 and b2.counts["comment_reasoning"] == 1 and b2.counts["unfinished_todos"] == 1, (
        b2.notes
    )
    assert b2.total < b.total


def test_paths_made_in_the_sandbox_cannot_escape(sandboxed):
    ws, _ = sandboxed
    tb = Toolbox(ws, Sandbox(ws))
    r = tb.step(
        format_tool_call("shell", {"command": "ln -s /etc/passwd pw; ln -s shop inner; ln -s .. up; echo done"})
    )
    assert r[0].output.endswith("done")
    for path in ["pw", "up/x.py", "../x.py", "/etc/hostname"]:
        res = tb.execute(
            [ToolCall("read_file", {"path": path}), ToolCall("write_file", {"path": path, "content": "x"})]
        )
        assert not any(x.ok for x in res), (path, res)
    assert tb.step(format_tool_call("read_file", {"path": "inner/cart.py"}))[
        0
    ].ok  # a link that stays inside is followed
    assert "root:" not in tb.step(format_tool_call("grep", {"pattern": "root"}))[0].output


# ---- semantic search over real code
def test_semantic_search_finds_stdlib_functions(tmp_path):
    lib = Path(sysconfig.get_paths()["stdlib"])
    for name in ["colorsys.py", "bisect.py", "fnmatch.py"]:
        shutil.copy(lib / name, tmp_path / name)
    idx = SemanticIndex(tmp_path)
    t0 = time.time()
    for query, path, title in [
        ("filter a list of file names by a glob pattern", "fnmatch.py", "filter"),
        ("translate a shell wildcard pattern into a regular expression", "fnmatch.py", "translate"),
    ]:
        hit = idx.search(query, k=3)[0]
        assert (hit.path, hit.title) == (path, title), (query, idx.search(query, k=3))
    hits = idx.search("insert an item into a sorted list keeping it sorted", k=3)
    assert hits[0].path == "bisect.py" and hits[0].title.startswith("insort"), hits
    assert {h.path for h in idx.search("convert a colour between RGB and HSV", k=3)} == {"colorsys.py"}
    assert time.time() - t0 < 120


# ---- issue 16: whatever the arguments, a call is a result

nasty = st.one_of(
    texty,
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=12),
    st.sampled_from(
        [
            "\ud800",
            "a\udcffb",
            "\0",
            "x\0y.py",
            "loop",
            "fifo",
            "link/x",
            "../x",
            "/etc/passwd",
            "(a+)+$",
            "(?=x)",
            "\\",
            "[",
            "caf\udce9.py",
            "/workspace",
            ".",
            "",
            " ",
        ]
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["read_file", "edit_file", "write_file", "grep", "todo", "finish"]), a=nasty, b=nasty, c=nasty
)
def test_toolbox_never_raises_on_any_arguments(tmp_path_factory, name, a, b, c):
    ws = tmp_path_factory.mktemp("ws")
    (ws / "ok.py").write_text("a = 1\n")
    import os

    os.mkfifo(ws / "fifo")
    os.symlink("loop", ws / "loop")
    os.symlink("/etc", ws / "link")
    args = {
        "read_file": {"path": a},
        "edit_file": {"path": a, "search": b, "replace": c},
        "write_file": {"path": a, "content": b},
        "grep": {"pattern": a, "path": b or "."},
        "todo": {"add": [a, b]},
        "finish": {"message": a},
    }[name]
    tb = Toolbox(ws)
    (r,) = tb.execute([ToolCall(name, args)])
    r.text().encode("utf-8")  # valid text for the tokenizer
    assert tb.n_calls == 1 and tb.n_failed == (not r.ok)
    assert Path("/etc/passwd").read_text() and not (ws.parent / "x").exists()


def test_regex_bomb_does_not_stall_other_threads(tmp_path):
    "grep runs RE2: `(a+)+$` over a long line costs microseconds, and another thread keeps running meanwhile."
    import threading

    (tmp_path / "a.txt").write_text(("a" * 60 + "b\n") * 2000)
    ticks, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=spin)
    th.start()
    t0 = time.time()
    try:
        r = Toolbox(tmp_path).step(
            format_tool_call("grep", {"pattern": "(a+)+$"}) + format_tool_call("grep", {"pattern": "(x+x+)+y"})
        )
    finally:
        stop.set()
        th.join()
    assert [x.output for x in r] == ["no matches", "no matches"] and time.time() - t0 < 2 and ticks[0] > 0, (r, ticks)
