"""The task suites with the real parts, at the scale CI checks: 130 generated tasks validated in real bubblewrap
sandboxes, the oracle and a random policy run through the real tools, judge and reward, the oracle on c2bench; the
`c2 tasks` command. The record, the generators, edits, the judge and the lookup by name are unit-tested in their
notebooks (22_tasks, 23_synthetic, 24_judge, 27_suites)."""

import dataclasses, json, time
import pytest
from conftest import c2, one_line_error
from composer2.config import load_config
from composer2.agent.episode import run_episodes
from composer2.tasks.judge import run_tests
from composer2.agent.policies import OraclePolicy, RandomPolicy
from composer2.tasks.suites import load_suite
from composer2.tasks.synthetic import long_horizon_suite, synthetic_suite

CFG = load_config("smoke")


def _need_sandbox():
    from composer2.sandbox.host import SandboxUnavailable, bwrap_path

    try:
        bwrap_path()
    except SandboxUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def suites():
    "100 synthetic (train + eval) and 30 long-horizon tasks, as CI runs them."
    t = CFG.tasks
    return dict(
        syn=synthetic_suite(t, "train", 70) + synthetic_suite(t, "eval", 30),
        lh=long_horizon_suite(t, "train", 20, context_tokens=CFG.model.max_seq_len) + long_horizon_suite(t, "eval", 10),
    )


def _verdicts(tasks, workers=4):
    from composer2.sandbox.bwrap import Sandbox, SandboxPool
    from composer2.sandbox.workspace import make_workspace, remove_workspace

    def one(task):
        out = []
        for files in (task.files, task.target):
            ws = make_workspace(files)
            try:
                out.append(run_tests(task, ws, Sandbox(ws, CFG.sandbox)))
            finally:
                remove_workspace(ws)
        return tuple(out)

    with SandboxPool(workers) as pool:
        return pool.map(one, tasks)


def test_every_task_fails_as_shipped_and_passes_when_fixed(suites):
    _need_sandbox()
    tasks = suites["syn"] + suites["lh"]
    v = _verdicts(tasks)
    assert all(x == (False, True) for x in v), [(t.id, x) for t, x in zip(tasks, v) if x != (False, True)]


def test_oracle_solves_and_random_does_not(suites, capsys):
    _need_sandbox()
    tasks = suites["syn"] + suites["lh"]
    t0 = time.time()
    eps = run_episodes(tasks, lambda t: OraclePolicy(), CFG, workers=4)
    t1 = time.time()
    reps = run_episodes(
        tasks[:50] + tasks[100:115], lambda t: RandomPolicy(int(t.meta["hash"][:8], 16)), CFG, workers=4
    )
    rate = lambda es: sum(e.solved for e in es) / len(es)
    with capsys.disabled():
        print(
            f"\noracle: synthetic {rate(eps[:100]):.1%}, long-horizon {rate(eps[100:]):.1%} ({t1 - t0:.1f}s); "
            f"random: {rate(reps):.1%} ({time.time() - t1:.1f}s)"
        )
    assert rate(eps[:100]) >= 0.99 and rate(eps[100:]) >= 0.99, [
        (e.task.id, e.test_output) for e in eps if not e.solved
    ]
    assert rate(reps) <= 0.02
    for e in eps:
        assert (
            e.stop_reason == "finish" and e.toolbox.n_failed == e.toolbox.n_malformed == 0 and e.reward.correct == 1.0
        )
        assert (
            e.reward.unfinished_todos == 0
            and e.reward.style == 0
            and e.turns == len(e.turn_texts) == len(e.context_tokens)
        )
    # parallel reads: one turn reads every file that matters at once -- the first, or the second when the prompt does
    # not name the file and the first finds it
    read_turn = lambda e: e.turn_texts[1] if '"read_file"' not in e.turn_texts[0] else e.turn_texts[0]
    assert all(read_turn(e).count('"read_file"') == len(e.task.meta["must_read"]) for e in eps[:100])
    assert all(
        ('"grep"' in e.turn_texts[0] or '"shell"' in e.turn_texts[0]) == ('"read_file"' not in e.turn_texts[0])
        for e in eps[:100]
    )
    assert sum(r.toolbox.n_malformed for r in reps) > 0 and all(r.reward.total < 0.5 for r in reps)


def test_oracle_solves_c2bench_through_edit_file(capsys):
    _need_sandbox()
    from composer2.tasks.c2bench import spread_sample

    tasks = spread_sample(load_suite(load_config("smoke", overrides=["tasks.suite=c2bench"]), "eval"), 8)
    eps = run_episodes(tasks, lambda t: OraclePolicy(), CFG, workers=4)
    with capsys.disabled():
        print(f"\noracle on c2bench: {sum(e.solved for e in eps)}/{len(eps)}")
    assert all(e.solved for e in eps), [(e.task.id, e.test_output[-300:]) for e in eps if not e.solved]
    for e in eps:  # fixed with edit_file, not rewritten; a long module is read around the fix only
        mod = e.task.meta["module"] + ".py"
        assert (
            e.toolbox.calls_by_tool["edit_file"] >= 1
            and "write_file" not in e.toolbox.calls_by_tool
            and e.changed_files == [mod]
        )
        read = next(t for t in e.turn_texts if '"read_file"' in t)  # after an ls when the prompt does not name the file
        assert ('"start"' in read) == (e.task.files[mod].count("\n") > 150)
    assert any('"start"' in next(t for t in e.turn_texts if '"read_file"' in t) for e in eps)


@pytest.mark.slow
def test_many_more_tasks_valid_and_solved():
    _need_sandbox()
    knobs = [CFG.tasks, dataclasses.replace(CFG.tasks, n_files=3, n_distractors=2, lines_to_change=2)]
    tasks = [t for k in knobs for t in synthetic_suite(k, "train", 300) + synthetic_suite(k, "eval", 100)]
    tasks += long_horizon_suite(CFG.tasks, "train", 60, context_tokens=512) + long_horizon_suite(
        CFG.tasks, "eval", 40, context_tokens=2048
    )
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
