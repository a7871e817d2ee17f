"""`make test-nb NB=31_model`: one notebook's tests with the flags `make test` uses (tests/run_suite.py's `notebook`:
`bwrap` where bubblewrap is installed or CI=true, plus $C2_TEST_FLAGS), a line every 10 s while it runs, then PASS or
FAIL with its seconds (and nbdev_test's output on failure). $C2_HEARTBEAT_S sets the 10 s.

NB is a notebook's name (`31_model`), its file (`31_model.ipynb`, `nbs/31_model.ipynb`) or a unique prefix (`31`).
`--check NB` only resolves it (stdlib only: the Makefile calls it with the system Python before the venv exists) and
prints one line of error, or nothing, so that make stops with that one line."""

import difflib, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"


def resolve(name: str) -> tuple[Path | None, str]:
    "The notebook `name` means, or None and a one-line reason (with the nearest names when it is a typo)."
    names = sorted(p.stem for p in NBS.glob("*.ipynb"))
    if not name.strip():
        return None, f"test-nb: say which notebook, e.g. make test-nb NB=31_model (one of {names[0]} ... {names[-1]})"
    stem = Path(name.strip()).name.removesuffix(".ipynb")
    if stem in names:
        return NBS / f"{stem}.ipynb", ""
    starts = [n for n in names if n.startswith(stem)]
    if len(starts) == 1:
        return NBS / f"{starts[0]}.ipynb", ""
    near = starts or difflib.get_close_matches(stem, names, n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(near)}?)" if near else f" (one of {', '.join(names)})"
    return None, f"test-nb: no notebook {name.strip()} in nbs/{hint}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        nb, why = resolve(" ".join(argv[1:]))
        if nb is None:
            print(why)
        return 0
    nb, why = resolve(" ".join(argv))
    if nb is None:
        print(why, file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "tests"))
    import run_suite  # the same command and flags as `make test`

    real_run = run_suite.run

    def run(cmd, **kw):  # say what runs (the flags), then run it
        shown = [Path(cmd[0]).name, *cmd[1:]]
        print(f"{nb.relative_to(ROOT)}: {' '.join(shown)}", flush=True)
        return real_run(cmd, **kw)

    run_suite.run = run
    from composer2.core import heartbeat

    with heartbeat(f"{nb.name}'s tests", file=sys.stdout):
        name, ok, started, out, _ = run_suite.notebook(nb)
    run_suite.record(name, ok, started, out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
