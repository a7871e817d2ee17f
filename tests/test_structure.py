"""The library's shape, checked from its files: modules live in folders by concern (`composer2/FOLDER/MODULE.py`, a few
shared ones at the top), dependencies point down the notebook order (no module imports a module of a later notebook,
so there is no import cycle, and a lazy `"composer2.x.y:function"` string points down too), no notebook imports a later
notebook's module, a folder's notebooks are numbered together, no module takes another folder's private name,
export cells stay small, and no line of a module passes 120 characters. Each import is found by parsing (`ast`),
including imports inside functions, which an import-time check would miss."""

import ast, json, re
from pathlib import Path
from conftest import ROOT

NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
PKG = ROOT / "composer2"
# in ruff-formatted lines: formatting (one statement per line) took the same cells from a mean of 16.1 lines to 22.9
MAX_MEAN_EXPORT_CELL_LINES = 28
MAX_LINE = 120  # ruff's line length; it does not wrap docstrings, comments or string literals: the notebooks do
LAZY = re.compile(r"composer2\.([\w.]+?)(?::\w+)?")


def cells(nb):
    return json.loads(nb.read_text())["cells"]


def source(cell):
    return "".join(cell["source"])


def default_exp(nb) -> str | None:
    for c in cells(nb):
        m = re.match(r"#\|\s*default_exp\s+(\S+)", source(c))
        if m:
            return m.group(1)
    return None


def module_order() -> dict:
    "{dotted module: position} in notebook order, from each notebook's `#| default_exp`."
    order = {}
    for nb in NBS:
        m = default_exp(nb)
        if m:
            order[m] = len(order)
    return order


def folder(module: str) -> str:
    "A module's folder; a top-level module is a folder of its own."
    return module.rsplit(".", 1)[0] if "." in module else module


def imports(code: str, module: str | None, known: set) -> list[tuple[str, list[str]]]:
    """The composer2 modules `code` imports, at any depth, each with the names taken from it: [(module, names)].
    `module` is the dotted module the code belongs to (for relative imports), None for a notebook's or a test's code."""
    out = []
    for n in ast.walk(ast.parse(code)):
        if isinstance(n, ast.ImportFrom):
            if n.level:
                if module is None:
                    continue
                base = module.split(".")[: -n.level] if n.level <= module.count(".") + 1 else []
                target = ".".join(base + ([n.module] if n.module else []))
            elif n.module and (n.module == "composer2" or n.module.startswith("composer2.")):
                target = n.module[len("composer2.") :] if n.module != "composer2" else ""
            else:
                continue
            names = [a.name for a in n.names]
            if target in known:
                out.append((target, names))
            else:
                out += [(f"{target}.{a}".lstrip("."), []) for a in names if f"{target}.{a}".lstrip(".") in known]
        elif isinstance(n, ast.Import):
            out += [(a.name[len("composer2.") :], []) for a in n.names if a.name[len("composer2.") :] in known]
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and module is not None:
            m = LAZY.fullmatch(n.value)
            if m and m.group(1) in known:
                out.append((m.group(1), []))
    return out


def module_file(mod: str) -> Path:
    return PKG / (mod.replace(".", "/") + ".py")


def test_every_module_has_a_notebook():
    order = module_order()
    mods = {p.relative_to(PKG).with_suffix("").as_posix().replace("/", ".") for p in PKG.rglob("*.py")}
    mods = {m for m in mods if m.split(".")[-1] not in ("__init__", "_modidx")}
    assert mods == set(order), mods ^ set(order)


def test_modules_import_only_earlier_modules():
    order, upward = module_order(), []
    for mod, pos in order.items():
        deps = {d for d, _ in imports(module_file(mod).read_text(), mod, set(order))}
        upward += [f"{mod} -> {d}" for d in deps if order[d] >= pos and d != mod]
    assert not upward, "imports of a later notebook's module (or a cycle): " + ", ".join(upward)


def test_no_module_takes_another_folders_private_name():
    order, taken = module_order(), []
    for mod in order:
        for dep, names in imports(module_file(mod).read_text(), mod, set(order)):
            taken += [f"{mod} <- {dep}.{n}" for n in names if n.startswith("_") and folder(dep) != folder(mod)]
    assert not taken, "private names taken across folders: " + ", ".join(taken)


def test_notebooks_import_only_earlier_modules():
    order, upward = module_order(), []
    for nb in NBS:
        mine = default_exp(nb)
        limit = order[mine] if mine else -1
        for c in cells(nb):
            if c["cell_type"] != "code":
                continue
            code = "\n".join(l for l in source(c).splitlines() if not l.lstrip().startswith(("%", "!")))
            try:
                deps = {d for d, _ in imports(code, None, set(order))}
            except SyntaxError:
                continue
            upward += [f"{nb.name} -> {d}" for d in deps if order[d] > limit]
    assert not upward, "notebooks importing a later notebook's module: " + ", ".join(sorted(set(upward)))


def test_a_folders_notebooks_are_numbered_together():
    runs = []
    for mod in module_order():
        if not runs or runs[-1] != folder(mod):
            runs.append(folder(mod))
    split = sorted({f for f in runs if runs.count(f) > 1})
    assert not split, f"folders whose notebooks are not contiguous in the notebook order: {split}"


def test_the_structure_checks_can_fail():
    "The import finder sees what the checks above rely on: relative, absolute, function-level and lazy imports."
    known = {"config", "core", "model.moe", "kernels.registry", "kernels.mx_gemm", "agent.rewards"}
    code = (
        "from ..config import Config\nfrom .registry import _private\ndef f():\n    from composer2.model.moe import M\n"
        "X = 'composer2.kernels.mx_gemm:mxfp8_grouped_mm'\nfrom composer2.agent import rewards\nimport composer2.core\n"
    )
    found = imports(code, "kernels.registry", known)
    assert found == [
        ("config", ["Config"]),
        ("kernels.registry", ["_private"]),
        ("agent.rewards", []),
        ("core", []),
        ("model.moe", ["M"]),
        ("kernels.mx_gemm", []),
    ], found
    assert folder("kernels.registry") == "kernels" and folder("config") == "config"


def test_export_cells_are_small():
    lines = [
        len(source(c).splitlines())
        for nb in NBS
        for c in cells(nb)
        if c["cell_type"] == "code" and re.match(r"#\|\s*export\b", source(c))
    ]
    mean = sum(lines) / len(lines)
    assert mean < MAX_MEAN_EXPORT_CELL_LINES, f"export cells average {mean:.1f} lines ({len(lines)} cells)"


def long_lines(text: str) -> list[int]:
    """Numbers of the lines of a module's `text` over MAX_LINE characters, but for the one nbdev writes itself and
    cannot be told to wrap shorter: `__all__ = [...]`, which it wraps at MAX_LINE characters before adding its
    10-character prefix (the package is what `nbdev_export` writes, so nothing may rewrap it after)."""
    return [
        i
        for i, line in enumerate(text.splitlines(), 1)
        if len(line) > MAX_LINE and not (line.startswith("__all__ = [") and len(line) <= MAX_LINE + len("__all__ = "))
    ]


def test_module_lines_fit():
    nbdev_all = f"__all__ = [{'a' * (MAX_LINE - 2)}]"  # as long as nbdev writes it: exempt; one character more is not
    assert long_lines(f'{nbdev_all}\nx = 1  # {"c" * MAX_LINE}\n"{"s" * MAX_LINE}"\n{nbdev_all}b\n') == [2, 3, 4]
    long = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(PKG.rglob("*.py"))
        if p.name != "_modidx.py"
        for i in long_lines(p.read_text())
    ]
    assert not long, f"lines over {MAX_LINE} characters (wrap them in their notebook): " + ", ".join(long)
