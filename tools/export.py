"""`make export`'s first half: nbdev_export, then each module's `__all__` wrapped to 120-character lines.

nbdev wraps the list of a module's exported names at 120 characters and only then puts `__all__ = ` in front of the
first line, so that line can reach 130. This script runs nbdev's export and rewraps those lists, nothing else: the
rest of each module is the notebooks' code as nbdev writes it. `tests/run_suite.py`'s sync check runs this script, so
a notebook edited but not exported still fails there. It is not a formatter: ruff formats the notebooks themselves."""

import ast, re, subprocess, sys
from pathlib import Path
from textwrap import TextWrapper

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 120
ALL = re.compile(r"^__all__ = \[.*?\]$", re.S | re.M)


def wrap_all(text: str) -> str:
    "`text` of a module with its `__all__ = [...]` list rewrapped so that no line is wider than WIDTH."
    m = ALL.search(text)
    if m is None:
        return text
    names = ast.literal_eval(m.group(0).removeprefix("__all__ = "))
    tw = TextWrapper(WIDTH, initial_indent="__all__ = ", subsequent_indent=" " * 11, break_long_words=False)
    return text[: m.start()] + "\n".join(tw.wrap(str(names))) + text[m.end() :]


def main() -> int:
    "nbdev_export, then every module under composer2/ rewrapped in place where its `__all__` changes; nbdev's status."
    r = subprocess.run([str(Path(sys.executable).parent / "nbdev_export")], cwd=ROOT)
    for p in sorted((ROOT / "composer2").rglob("*.py")):
        text = p.read_text()
        new = wrap_all(text)
        if new != text:
            p.write_text(new)
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
