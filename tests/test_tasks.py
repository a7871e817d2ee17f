"""composer2.tasks with the real parts: generated suites validated in real bubblewrap sandboxes, the oracle and a
random policy run through the real tools, judge and reward; the `c2 tasks` command."""
import dataclasses, json, statistics, time
import pytest
from conftest import c2, one_line_error
from composer2.config import C2Error, load_config
from composer2.episode import oracle_transcripts, run_episodes
from composer2.judge import judge, protected_files, run_tests
from composer2.policies import OraclePolicy, RandomPolicy
from composer2.suites import load_suite
from composer2.tasks import Task, edit_calls, estimate_tokens, lines_changed, suite_stats
from composer2.synthetic import long_horizon_suite, synthetic_suite

CFG = load_config("smoke")

def _need_sandbox():
    from composer2.host import SandboxUnavailable, bwrap_path
    try: bwrap_path()
    except SandboxUnavailable as e: pytest.skip(str(e))

@pytest.fixture(scope="module")
def suites():
    "100 synthetic (train + eval) and 30 long-horizon tasks, as CI runs them."
    t = CFG.tasks
    return dict(syn=synthetic_suite(t, "train", 70) + synthetic_suite(t, "eval", 30),
                lh=long_horizon_suite(t, "train", 20, context_tokens=CFG.model.max_seq_len) + long_horizon_suite(t, "eval", 10))

def _verdicts(tasks, workers=4):
    from composer2.sandbox import Sandbox, SandboxPool
    from composer2.workspace import make_workspace, remove_workspace
    def one(task):
        out = []
        for files in (task.files, task.target):
            ws = make_workspace(files)
            try: out.append(run_tests(task, ws, Sandbox(ws, CFG.sandbox)))
            finally: remove_workspace(ws)
        return tuple(out)
    with SandboxPool(workers) as pool: return pool.map(one, tasks)

def test_task_record_round_trip_and_version():
    t = synthetic_suite(CFG.tasks, "eval", 1)[0]
    assert Task.from_json(t.to_json()) == t
    rec = json.loads(t.to_json()); rec["format"] = 0
    with pytest.raises(C2Error, match="format 0"): Task.from_json(json.dumps(rec))

def test_splits_are_disjoint_deterministic_and_seeded():
    for make, n in [(synthetic_suite, 150), (lambda c, s, n: long_horizon_suite(c, s, n, context_tokens=128), 50)]:
        tr, ev = make(CFG.tasks, "train", n), make(CFG.tasks, "eval", n // 4)
        htr, hev = {t.content_hash for t in tr}, {t.content_hash for t in ev}
        assert len(htr) == n and len(hev) == n // 4 and not htr & hev
        assert [t.to_json() for t in make(CFG.tasks, "eval", n // 4)] == [t.to_json() for t in ev]
        other = make(dataclasses.replace(CFG.tasks, seed=7), "train", 20)
        assert {t.content_hash for t in other} != {t.content_hash for t in tr[:20]}
    with pytest.raises(C2Error, match="unknown split"): synthetic_suite(CFG.tasks, "test")

def test_prompts_are_terse(suites, capsys):
    for name, tasks in suites.items():
        med = statistics.median(len(t.prompt) for t in tasks)
        with capsys.disabled(): print(f"\n{name}: median prompt {med} characters (CursorBench: 390)")
        assert med < 390 / 4 and max(len(t.prompt) for t in tasks) < 390

def test_synthetic_tasks_are_small_and_follow_the_knobs():
    from composer2.data import build_data
    data = build_data(CFG, progress=False)
    tasks = synthetic_suite(CFG.tasks, "train", 100)
    toks = [len(data.encode(t.prompt + "".join(t.files.values()))) for t in tasks]
    assert statistics.median(toks) < 400, statistics.median(toks)   # the whole task fits a small model's context
    assert all(estimate_tokens(t.prompt + "".join(t.files.values())) <= n for t, n in zip(tasks, toks))   # a lower bound
    assert {t.meta["kind"] for t in tasks} == set(CFG.tasks.bug_kinds)
    knobs = dataclasses.replace(CFG.tasks, n_files=4, n_distractors=3, lines_to_change=3, bug_kinds=["comparison", "missing"])
    for t in synthetic_suite(knobs, "train", 30):
        assert len(t.meta["kinds"]) == 3 and set(t.meta["kinds"]) <= {"comparison", "missing"}
        assert len(t.meta["templates"]) == 6 and 1 <= len(t.meta["modules"]) <= 4 and t.meta["lines_changed"] >= 3
    with pytest.raises(C2Error, match="unknown kinds"): synthetic_suite(dataclasses.replace(CFG.tasks, bug_kinds=["typo"]), "train", 1)

def test_long_horizon_needs_more_than_the_window(suites):
    win = CFG.model.max_seq_len
    for t in suites["lh"]:
        assert t.meta["min_context_tokens"] > 1.5 * t.meta["context_tokens"] >= 1.5 * win
        assert len(t.meta["kinds"]) >= 2 and "config" in t.meta["kinds"] and t.files["README.md"].count("- [ ]") == len(t.meta["kinds"])
        assert len({p for p in t.files if t.files[p] != t.target[p]}) >= 2    # fixes across files
    for t in long_horizon_suite(CFG.tasks, "eval", 3, context_tokens=2048):
        assert t.meta["min_context_tokens"] > 3072

def test_every_task_fails_as_shipped_and_passes_when_fixed(suites):
    _need_sandbox()
    tasks = suites["syn"] + suites["lh"]
    v = _verdicts(tasks)
    assert all(x == (False, True) for x in v), [(t.id, x) for t, x in zip(tasks, v) if x != (False, True)]

def test_edits_reach_the_solution_exactly(suites, tmp_path):
    from composer2.tools import Toolbox
    from composer2.protocol import format_tool_call
    for i, t in enumerate(suites["syn"][:40] + suites["lh"][:10]):
        ws = tmp_path / str(i)
        for p, s in t.files.items(): (ws / p).parent.mkdir(parents=True, exist_ok=True); (ws / p).write_text(s)
        res = Toolbox(ws).step("".join(format_tool_call(n, a) for n, a in edit_calls(t.files, t.solution)))
        assert all(r.ok for r in res) and {p: (ws / p).read_text() for p in t.files} == t.target, t.id
    assert lines_changed({"a": "x\ny\n"}, {"a": "x\nz\n"}) == 1 and lines_changed({"a": "x\n"}, {}, overlay=False) == 1

def test_judge_restores_the_tests(suites):
    _need_sandbox()
    from composer2.sandbox import Sandbox
    from composer2.workspace import make_workspace, remove_workspace
    t = suites["lh"][0]
    assert "run_tests.py" in protected_files(t) and "config.py" not in protected_files(t)
    ws = make_workspace(t.files)
    try:
        (ws / "run_tests.py").write_text("print('all good')\n")   # a tampered runner is replaced by the task's own
        assert not run_tests(t, ws, Sandbox(ws))
        for p, s in t.target.items():
            if p not in protected_files(t): (ws / p).write_text(s)
        assert judge(t, ws, Sandbox(ws)).returncode == 0
    finally: remove_workspace(ws)

def test_oracle_solves_and_random_does_not(suites, capsys):
    _need_sandbox()
    tasks = suites["syn"] + suites["lh"]
    t0 = time.time()
    eps = run_episodes(tasks, lambda t: OraclePolicy(), CFG, workers=4)
    t1 = time.time()
    reps = run_episodes(tasks[:50] + tasks[100:115], lambda t: RandomPolicy(int(t.meta["hash"][:8], 16)), CFG, workers=4)
    rate = lambda es: sum(e.solved for e in es) / len(es)
    with capsys.disabled():
        print(f"\noracle: synthetic {rate(eps[:100]):.1%}, long-horizon {rate(eps[100:]):.1%} ({t1 - t0:.1f}s); "
              f"random: {rate(reps):.1%} ({time.time() - t1:.1f}s)")
    assert rate(eps[:100]) >= 0.99 and rate(eps[100:]) >= 0.99, [(e.task.id, e.test_output) for e in eps if not e.solved]
    assert rate(reps) <= 0.02
    for e in eps:
        assert e.stop_reason == "finish" and e.toolbox.n_failed == e.toolbox.n_malformed == 0 and e.reward.correct == 1.0
        assert e.reward.unfinished_todos == 0 and e.reward.style == 0 and e.turns == len(e.turn_texts) == len(e.context_tokens)
    # parallel reads: one turn reads every file that matters at once -- the first, or the second when the prompt does
    # not name the file and the first finds it
    read_turn = lambda e: e.turn_texts[1] if '"read_file"' not in e.turn_texts[0] else e.turn_texts[0]
    assert all(read_turn(e).count('"read_file"') == len(e.task.meta["must_read"]) for e in eps[:100])
    assert all(('"grep"' in e.turn_texts[0] or '"shell"' in e.turn_texts[0]) == ('"read_file"' not in e.turn_texts[0]) for e in eps[:100])
    assert sum(r.toolbox.n_malformed for r in reps) > 0 and all(r.reward.total < 0.5 for r in reps)

def test_oracle_solves_c2bench_through_edit_file(capsys):
    _need_sandbox()
    from composer2.c2bench import spread_sample
    tasks = spread_sample(load_suite(load_config("smoke", overrides=["tasks.suite=c2bench"]), "eval"), 8)
    eps = run_episodes(tasks, lambda t: OraclePolicy(), CFG, workers=4)
    with capsys.disabled(): print(f"\noracle on c2bench: {sum(e.solved for e in eps)}/{len(eps)}")
    assert all(e.solved for e in eps), [(e.task.id, e.test_output[-300:]) for e in eps if not e.solved]
    for e in eps:   # fixed with edit_file, not rewritten; a long module is read around the fix only
        mod = e.task.meta["module"] + ".py"
        assert e.toolbox.calls_by_tool["edit_file"] >= 1 and "write_file" not in e.toolbox.calls_by_tool and e.changed_files == [mod]
        read = next(t for t in e.turn_texts if '"read_file"' in t)   # after an ls when the prompt does not name the file
        assert ('"start"' in read) == (e.task.files[mod].count("\n") > 150)
    assert any('"start"' in next(t for t in e.turn_texts if '"read_file"' in t) for e in eps)

def test_oracle_transcripts_render_for_sft():
    _need_sandbox()
    from composer2.data import build_data
    from composer2.protocol import Transcript
    data = build_data(CFG, progress=False)
    trs = oracle_transcripts(CFG, 4, workers=2)
    assert len(trs) == 4
    for tr in trs:
        ids, mask = tr.render(data)
        assert Transcript.from_ids(ids, data) == tr and 0 < sum(mask) < len(ids)

def test_load_suite_by_name():
    assert [t.id for t in load_suite(CFG, "eval", 3)] == ["syn-eval-00000", "syn-eval-00001", "syn-eval-00002"]
    lh = load_suite(load_config("cpu", overrides=["tasks.suite=long_horizon"]), "train", 2)
    assert all(t.meta["context_tokens"] == 512 and t.meta["min_context_tokens"] > 768 for t in lh)
    s = suite_stats(lh)
    assert s["tasks"] == 2 and s["min_context_tokens_min"] > 768

@pytest.mark.slow
def test_many_more_tasks_valid_and_solved():
    _need_sandbox()
    knobs = [CFG.tasks, dataclasses.replace(CFG.tasks, n_files=3, n_distractors=2, lines_to_change=2)]
    tasks = [t for k in knobs for t in synthetic_suite(k, "train", 300) + synthetic_suite(k, "eval", 100)]
    tasks += long_horizon_suite(CFG.tasks, "train", 60, context_tokens=512) + long_horizon_suite(CFG.tasks, "eval", 40, context_tokens=2048)
    assert all(x == (False, True) for x in _verdicts(tasks))
    eps = run_episodes(tasks, lambda t: OraclePolicy(), CFG, workers=4)
    print(f"oracle solved {sum(e.solved for e in eps)}/{len(eps)}")
    assert sum(e.solved for e in eps) / len(eps) >= 0.99

# ---- the command line

def test_cli_tasks_stats_and_show():
    r = c2("tasks", "stats", "--split", "train", "-n", "50", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["tasks"] == 50 and s["prompt_chars_median"] < 390 and s["suites"] == "synthetic"
    r = c2("tasks", "show", "syn-eval-00001")
    assert r.returncode == 0, r.stderr
    t = synthetic_suite(CFG.tasks, "eval", 2)[1]
    assert f"prompt: {t.prompt}" in r.stdout and "the fix (solution diff)" in r.stdout and "+++ b/" in r.stdout
    one_line_error(c2("tasks", "show", "no-such-task"), "unknown task id 'no-such-task'")

def test_cli_tasks_oracle():
    _need_sandbox()
    r = c2("tasks", "oracle", "--suite", "long_horizon", "-n", "6")
    assert r.returncode == 0, r.stderr
    assert "oracle solved 6/6 long_horizon eval tasks (100.0%)" in r.stdout
