"""The library's shape, checked from its files: dependencies point down the notebook order (no module imports a module
of a later notebook, so there is no import cycle), no notebook imports a later notebook's module, and export cells
stay small. (A hard cap on a module's lines made code wider rather than clearer: issue 46 dropped it.) Each import
is found by parsing (`ast`), including imports inside functions, which an import-time check would miss."""
import ast, json, re
from pathlib import Path
import pytest
from conftest import ROOT

NBS = sorted((ROOT / "nbs").glob("*.ipynb"))
MAX_MEAN_EXPORT_CELL_LINES = 20


def cells(nb):
    return json.loads(nb.read_text())["cells"]


def source(cell):
    return "".join(cell["source"])


def module_order() -> dict:
    "{module: position} in notebook order, from each notebook's `#| default_exp`."
    order = {}
    for nb in NBS:
        for c in cells(nb):
            m = re.match(r"#\|\s*default_exp\s+(\S+)", source(c))
            if m: order[m.group(1)] = len(order)
    return order


def composer2_imports(code: str, package_relative: bool) -> set:
    "The composer2 modules `code` imports, at any depth (function-level imports included)."
    out = set()
    for n in ast.walk(ast.parse(code)):
        if isinstance(n, ast.ImportFrom) and n.module:
            if n.level == 1 and package_relative: out.add(n.module.split(".")[0])
            elif n.module.startswith("composer2."): out.add(n.module.split(".")[1])
            elif n.module == "composer2": out |= {a.name for a in n.names}
        elif isinstance(n, ast.Import):
            out |= {a.name.split(".")[1] for a in n.names if a.name.startswith("composer2.")}
    return out


def test_every_module_has_a_notebook():
    order = module_order()
    mods = {p.stem for p in (ROOT / "composer2").glob("*.py")} - {"__init__", "_modidx"}
    assert mods == set(order), (mods ^ set(order))


def test_modules_import_only_earlier_modules():
    order, upward = module_order(), []
    for mod, pos in order.items():
        deps = composer2_imports((ROOT / "composer2" / f"{mod}.py").read_text(), package_relative=True) & set(order)
        upward += [f"{mod} -> {d}" for d in deps if order[d] >= pos and d != mod]
    assert not upward, "imports of a later notebook's module (or a cycle): " + ", ".join(upward)


def test_notebooks_import_only_earlier_modules():
    order, upward = module_order(), []
    for nb in NBS:
        mine = {re.match(r"#\|\s*default_exp\s+(\S+)", source(c)).group(1) for c in cells(nb)
                if re.match(r"#\|\s*default_exp\s+(\S+)", source(c))}
        limit = max((order[m] for m in mine), default=-1)
        for c in cells(nb):
            if c["cell_type"] != "code": continue
            code = "\n".join(l for l in source(c).splitlines() if not l.lstrip().startswith(("%", "!")))
            try: deps = composer2_imports(code, package_relative=False) & set(order)
            except SyntaxError: continue
            upward += [f"{nb.name} -> {d}" for d in deps if order[d] > limit]
    assert not upward, "notebooks importing a later notebook's module: " + ", ".join(sorted(set(upward)))


def test_export_cells_are_small():
    lines = [len(source(c).splitlines()) for nb in NBS for c in cells(nb)
             if c["cell_type"] == "code" and re.match(r"#\|\s*export\b", source(c))]
    mean = sum(lines) / len(lines)
    assert mean < MAX_MEAN_EXPORT_CELL_LINES, f"export cells average {mean:.1f} lines ({len(lines)} cells)"
