"""Build the documentation site (`make docs`).

The site has four parts:

- the landing page, `nbs/index.md`;
- the guides, `nbs/guides/*.md` (what the README leaves out: every command, the design, measurements);
- the library reference: every notebook of `nbs/` after nbdev's processors (each `show_doc` rendered, export cells
  folded away), one page per notebook, named as nbdev names it (`31_model.ipynb` -> `model.html`);
- one page per study: its executed notebook of `studies/results/NAME/SCALE/`, headed by what it reproduces, its
  verdicts on the report's claims and its supporting checks from `results.json`, and links to the files of the run.

Everything is first staged into one folder (`--proc`, default `_proc/`): notebooks processed by nbdev (only those whose
source changed since they were last staged), the Markdown pages, the study pages and a `_quarto.yml` with the sidebar.
That folder is then rendered into `--out` (default settings.ini's `doc_path`, `_docs/`):

- by Quarto when a `quarto` executable is found (on PATH or in the venv): `quarto render` of the staged folder, as
  `nbdev_docs` does;
- otherwise by `render_plain` below, a static renderer of the same staged pages (nbconvert's Markdown, Pygments, no
  JavaScript). The PyPI package `quarto-cli` downloads its binary from GitHub while it installs, which machines without
  access to GitHub (this project's CI) cannot do, so the docs must build without it.

`nbdev_docs` itself is not called: with settings.ini's `recursive = False` it would leave out the guides and the
study pages (nbdev globs only the top of `nbs/`), and it writes `nbs/_quarto.yml`, `nbs/nbdev.yml`,
`nbs/sidebar.yml` and `composer2/_modidx.py`, none of which a docs build should touch.

    .venv/bin/python tools/docs_site.py                      # the whole site into _docs/
    .venv/bin/python tools/docs_site.py --only 00_core,02_stats --out /tmp/site --proc /tmp/proc   # a few notebooks
    .venv/bin/python tools/docs_site.py --renderer plain     # force the renderer (auto, quarto or plain)
"""

import argparse, html, json, os, re, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
RESULTS = ROOT / "studies" / "results"
TITLE = "composer2"

# guide pages in reading order (nbs/guides/NAME.md); any other guide follows in name order
GUIDES = [
    "setup",
    "commands",
    "pretraining",
    "agent",
    "rl",
    "studies",
    "slurm",
    "scale-out",
    "development",
    "architecture",
    "benchmarks",
    "measurements",
]
# the library's folders by concern, in the order of the notebook numbers; a top-level module is in "top level"
FOLDERS = [
    ("", "Top level"),
    ("data", "Data"),
    ("kernels", "Kernels"),
    ("model", "Model"),
    ("sandbox", "Sandbox"),
    ("tasks", "Tasks"),
    ("agent", "Agent"),
    ("pretrain", "Pretraining"),
    ("rl", "Reinforcement learning"),
    ("studies", "Studies (library)"),
    ("interop", "Interop"),
    ("cli", "Command line"),
]


# ---------------------------------------------------------------------------------------------------------- staging
def default_exp(nb: Path) -> str:
    "The module a library notebook exports to (`#| default_exp`), '' when none."
    for c in json.loads(nb.read_text())["cells"]:
        m = re.match(r"#\|\s*default_exp\s+(\S+)", "".join(c["source"]))
        if m:
            return m.group(1)
    return ""


def folder_of(nb: Path) -> str:
    "The folder of FOLDERS a notebook belongs to: its module's package, or '' for a top-level module."
    mod = default_exp(nb)
    if "." in mod:
        return mod.split(".")[0]
    return "cli" if mod == "cli" else ""


def library_notebooks(only: list[str] | None = None) -> list[Path]:
    nbs = sorted(NBS.glob("*.ipynb"))
    nbs = [p for p in nbs if not p.name.startswith(("_", ".")) and p.name != "index.ipynb"]
    if only:
        missing = set(only) - {p.stem for p in nbs}
        if missing:
            sys.exit(f"docs_site: no notebook {', '.join(sorted(missing))} in nbs/")
        nbs = [p for p in nbs if p.stem in only]
    return nbs


def _stale(src: Path, dst: Path) -> bool:
    "Whether dst must be made again: missing, or older than src, settings.ini or this script."
    if not dst.exists():
        return True
    return dst.stat().st_mtime < max(
        src.stat().st_mtime, (ROOT / "settings.ini").stat().st_mtime, Path(__file__).stat().st_mtime
    )


def _lenient_signature():
    """Make fastcore's signatures fall back to the annotations as written when one names a type the notebook defines
    further down (a forward reference under `from __future__ import annotations`, which show_doc cannot evaluate
    before the cell that defines the type has run)."""
    import inspect
    import fastcore.docments as docments

    if getattr(docments.signature, "lenient", False):
        return

    def signature(obj, *args, eval_str=False, **kw):
        try:
            return inspect.signature(obj, *args, eval_str=eval_str, **kw)
        except NameError:
            return inspect.signature(obj, *args, eval_str=False, **kw)

    signature.lenient = True
    docments.signature = signature


def _processors():
    """nbdev's notebook processors, except that a cell which fails while executed for the docs is reported and left
    with the outputs it had, instead of stopping the whole build. nbdev executes the export cells, the show_doc cells
    and every cell that imports something; a cell that mixes an import with test code needing names from cells nbdev
    does not run fails there (nbdev's "imports and other code" warning)."""
    from nbdev import processors as P

    class exec_show_docs(P.exec_show_docs):
        def __call__(self, cell):
            outputs = cell.get("outputs")
            try:
                super().__call__(cell)
            except Exception as e:
                self.k.exc = None
                if outputs is not None:
                    cell["outputs"] = outputs
                cause = e.__cause__ or e
                what = "a show_doc cell" if P._is_showdoc(cell) else "a cell"
                first = str(cause).splitlines()[0] if str(cause) else ""
                print(
                    f"docs_site: WARNING {what} of {Path(self.nb.path_).name} failed when executed for the docs "
                    f"and keeps its saved outputs: {type(cause).__name__}: {first}",
                    file=sys.stderr,
                    flush=True,
                )

    class Filter(P.FilterDefaults):
        def base_procs(self):
            return [exec_show_docs if p is P.exec_show_docs else p for p in super().base_procs()]

    return Filter


def _proc_one(job):
    "nbdev's processors over one notebook, in a fresh process (they execute the notebook's import and export cells)."
    src, dst = job
    import nbdev.serve_drv

    _lenient_signature()
    os.environ["IN_TEST"] = "1"
    try:
        nbdev.serve_drv.exec_nb(src, dst, _processors())
    finally:
        del os.environ["IN_TEST"]
    return dst


def stage_library(proc: Path, notebooks: list[Path], n_workers: int) -> list[Path]:
    "Process the notebooks whose staged copy is stale; return the staged paths of all of them."
    import importlib
    from fastcore.parallel import parallel

    worker = importlib.import_module(Path(__file__).stem)._proc_one  # by module name, so spawned workers find it
    jobs = [(nb, proc / nb.name) for nb in notebooks if _stale(nb, proc / nb.name)]
    if jobs:  # as nbdev_docs does: each notebook in a fresh process (its import and export cells are executed)
        print(f"docs_site: processing {len(jobs)} notebook(s) with nbdev ({n_workers} workers)", flush=True)
        parallel(worker, jobs, n_workers=n_workers, method="spawn", pause=0.01)
    return [proc / nb.name for nb in notebooks]


def _md_escape(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def study_summary(study, res: dict, files: list[str]) -> str:
    """The Markdown that heads a study's page: what it reproduces, the run, its verdicts on the report's claims, its
    supporting checks, the files."""
    from composer2.studies.runner import outcome

    lines = [f"**Reproduces:** report {study.reproduces}. {study.title}.", ""]
    if study.finding:
        lines += [f"**The report:** {study.finding}", ""]
    run = [f"scale `{res.get('scale', '?')}`", f"status **{res.get('status', '?')}**"]
    if res.get("commit"):
        run.append(f"commit `{str(res['commit'])[:7]}`" + (" (dirty)" if res.get("dirty") else ""))
    if res.get("finished"):
        run.append(f"finished {str(res['finished'])[:16].replace('T', ' ')}")
    if res.get("wall_time_s") is not None:
        run.append(f"{res['wall_time_s'] / 60:.1f} min here")
    if res.get("scratch_s") is not None:
        run.append(f"{res['scratch_s'] / 60:.1f} min from scratch")
    lines += ["**This run:** " + ", ".join(run) + ".", ""]
    lines += [f"**This run found:** {outcome(res)}.", ""]
    if res.get("verdicts"):
        lines += ["| claim | the report | ours | verdict | why |", "|---|---|---|---|---|"]
        for v in res["verdicts"]:
            cells = [_md_escape(v.get(k, "")) for k in ("report", "ours", "reason")]
            word = str(v.get("status")).replace("_", " ")
            lines.append(f"| `{v.get('id')}` | {cells[0]} | {cells[1]} | {word} | {cells[2]} |")
        lines.append("")
    lines += [
        "**Supporting checks:** build checks, preconditions and sanity bounds, not results.",
        "",
        "| check | statement | measured | threshold | holds |",
        "|---|---|---|---|---|",
    ]
    for c in res.get("claims", []):
        statement, measured = _md_escape(c.get("statement", "")), _md_escape(_fmt(c.get("measured")))
        lines.append(
            f"| `{c.get('id')}` | {statement} | {measured} | `{_md_escape(c.get('threshold', ''))}` "
            f"| {'yes' if c.get('holds') else '**no**'} |"
        )
    lines += [
        "",
        "**Files of this run:** " + ", ".join(f"[{f}]({study.name}/{f})" for f in files) + ".",
        "",
        "The executed notebook follows.",
        "",
    ]
    return "\n".join(lines)


NB_META = {"metadata": {}, "nbformat": 4, "nbformat_minor": 5}  # a page written as a notebook of our own cells


def _cell(kind: str, text: str) -> dict:
    c = {"cell_type": kind, "metadata": {}, "source": text}
    if kind == "code":
        c.update(outputs=[], execution_count=None)
    return c


def stage_studies(proc: Path, scale: str) -> list[Path]:
    """A page per registered study from its executed notebook and results.json at `scale`; the run's files (results,
    figures, the notebook itself) copied beside it. A study never run at that scale gets a page that says so."""
    from composer2.studies.registry import STUDIES
    from composer2.studies.runner import outcome

    out = proc / "studies"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    pages, rows = [], []
    for name, study in STUDIES.items():
        src = RESULTS / name / scale
        res_path, nb_path = src / "results.json", src / f"{name}.ipynb"
        if not (res_path.exists() and nb_path.exists()):  # a page all the same, under the name links to it use
            front = {"title": name, "description": study.title, "output-file": f"{name}.html"}
            fm = "---\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in front.items()) + "---"
            note = f"No run at scale `{scale}` yet: `c2 study run {name} --scale {scale}` makes one."
            page = out / f"{name}.ipynb"
            page.write_text(json.dumps(dict(cells=[_cell("raw", fm), _cell("markdown", note)], **NB_META), indent=1))
            pages.append(page)
            rows.append(f"| [{name}]({name}.ipynb) | {study.reproduces} | {_md_escape(study.title)} | not run |")
            continue
        res = json.loads(res_path.read_text())
        files = [p.name for p in sorted(src.iterdir()) if p.suffix in (".json", ".png", ".svg", ".ipynb")]
        (out / name).mkdir()
        for f in files:
            shutil.copy2(src / f, out / name / f)
        nb = json.loads(nb_path.read_text())
        cells = nb["cells"]
        title, desc = name, study.title
        if cells and cells[0]["cell_type"] == "markdown":  # the notebook's own "# title" and "> description"
            first = "".join(cells[0]["source"]).strip().splitlines()
            if first and first[0].startswith("# "):
                title = first[0][2:].strip()
                rest = [l for l in first[1:] if l.strip()]
                if rest and rest[0].startswith("> "):
                    desc, rest = rest[0][2:].strip(), rest[1:]
                cells[0]["source"] = "\n".join(rest)
        front = {"title": title, "description": desc, "output-file": f"{name}.html"}
        fm = "---\n" + "".join(f"{k}: {json.dumps(v)}\n" for k, v in front.items()) + "---"
        nb["cells"] = [_cell("raw", fm), _cell("markdown", study_summary(study, res, files))] + cells
        page = out / f"{name}.ipynb"
        page.write_text(json.dumps(nb, indent=1))
        pages.append(page)
        rows.append(f"| [{name}]({name}.ipynb) | {study.reproduces} | {_md_escape(study.title)} | {outcome(res)} |")
    index = out / "index.md"
    index.write_text(
        "---\ntitle: Studies\ndescription: One page per study, from its executed notebook and its "
        f"results at scale `{scale}`.\n---\n\n"
        "Each study is a notebook in `studies/` that reproduces one figure or claim of the report. "
        "How to run, submit and add studies: [the studies guide](../guides/studies.md).\n\n"
        "| study | reproduces | what | what its run found |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    return [index] + pages


def stage_pages(proc: Path) -> list[Path]:
    "The landing page and the guides, copied as they are."
    pages = []
    shutil.copy2(NBS / "index.md", proc / "index.md")
    pages.append(proc / "index.md")
    gdir = proc / "guides"
    if gdir.exists():
        shutil.rmtree(gdir)
    gdir.mkdir()
    names = [p.stem for p in sorted((NBS / "guides").glob("*.md"))]
    for n in [g for g in GUIDES if g in names] + sorted(set(names) - set(GUIDES)):
        shutil.copy2(NBS / "guides" / f"{n}.md", gdir / f"{n}.md")
        pages.append(gdir / f"{n}.md")
    return pages


def sidebar(proc: Path, library: list[Path], guides: list[Path], studies: list[Path]) -> list:
    "The sidebar's sections as [(title, [staged paths])]; the same for Quarto and the plain renderer."
    by_folder = {}
    for nb in library:
        by_folder.setdefault(folder_of(NBS / nb.name), []).append(nb)
    lib = [(f"Library: {title}", by_folder[f]) for f, title in FOLDERS if f in by_folder]
    return [("Guides", guides)] + lib + [("Studies", studies)]


def quarto_yml(proc: Path, sections: list, site: str) -> str:
    def rel(p):
        return p.relative_to(proc).as_posix()

    lines = [
        "project:",
        "  type: website",
        f"  output-dir: {site}",
        "",
        "format:",
        "  html:",
        "    theme: cosmo",
        "    toc: true",
        "",
        "website:",
        f'  title: "{TITLE}"',
        "  navbar:",
        "    search: true",
        "    left:",
        "      - href: index.md",
        "        text: Home",
        "      - href: guides/setup.md",
        "        text: Guides",
        "      - href: studies/index.md",
        "        text: Studies",
        "  sidebar:",
        "    style: floating",
        "    contents:",
        "      - index.md",
    ]
    for title, pages in sections:
        lines += [f'      - section: "{title}"', "        contents:"] + [f"          - {rel(p)}" for p in pages]
    return "\n".join(lines) + "\n"


def stage(proc: Path, only: list[str] | None, scale: str, n_workers: int):
    proc.mkdir(parents=True, exist_ok=True)
    notebooks = library_notebooks(only)
    keep = {nb.name for nb in notebooks}
    for old in proc.glob("*.ipynb"):  # a notebook renamed or left out since the last build
        if old.name not in keep:
            old.unlink()
    library = stage_library(proc, notebooks, n_workers)
    pages = stage_pages(proc)
    studies = stage_studies(proc, scale)
    sections = sidebar(proc, library, pages[1:], studies)
    (proc / "_quarto.yml").write_text(quarto_yml(proc, sections, "_site"))
    return sections


# ------------------------------------------------------------------------------------------------------ rendering
def find_quarto() -> str | None:
    return shutil.which("quarto") or next(
        (str(p) for p in [Path(sys.executable).parent / "quarto"] if p.exists()), None
    )


def render_quarto(quarto: str, proc: Path, out: Path):
    site = proc / "_site"
    if site.exists():
        shutil.rmtree(site)
    subprocess.run([quarto, "render", "--no-cache"], cwd=proc, check=True)
    if out.exists():
        shutil.rmtree(out)
    shutil.move(str(site), str(out))


_DIRECTIVE = re.compile(r"^#\|\s*([\w-]+)\s*:\s*(.*?)\s*$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _front(text: str) -> dict:
    "YAML front matter of a page or raw cell ('---' ... '---'), {} when none."
    import yaml

    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    return (yaml.safe_load(m.group(1)) or {}) if m else {}


def _strip_front(text: str) -> str:
    return re.sub(r"^---\s*\n.*?\n---\s*(\n|$)", "", text, count=1, flags=re.DOTALL)


def out_name(page: Path, proc: Path) -> str:
    "The site path of a staged page, as Quarto names it (a notebook's `output-file`, else the stem)."
    rel = page.relative_to(proc)
    if page.suffix == ".ipynb":
        nb = json.loads(page.read_text())
        raw = next((c for c in nb["cells"] if c["cell_type"] == "raw"), None)
        fm = _front("".join(raw["source"])) if raw else {}
        if fm.get("output-file"):
            return (rel.parent / fm["output-file"]).as_posix()
    return rel.with_suffix(".html").as_posix()


class Plain:
    "A static renderer of the staged pages: one HTML file per page, a shared stylesheet, no script."

    def __init__(self, proc: Path, out: Path, sections: list):
        self.proc, self.out, self.sections = proc, out, sections
        pages = [proc / "index.md"] + [p for _, ps in sections for p in ps]
        self.names = {p.relative_to(proc).as_posix(): out_name(p, proc) for p in pages}
        self.titles = {}

    # --- pieces
    def md(self, text: str) -> str:
        "Markdown as nbconvert renders it, with heading ids in lower case as Quarto makes them."
        from nbconvert.filters.markdown_mistune import markdown2html_mistune

        return re.sub(
            r'(<h[1-6] id="|class="anchor-link" href="#)([^"]+)"',
            lambda m: f'{m[1]}{m[2].lower()}"',
            markdown2html_mistune(text),
        )

    def code(self, src: str) -> str:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        return highlight(src, PythonLexer(), HtmlFormatter(cssclass="highlight"))

    def output(self, o: dict, asis: bool, files: Path, stem: str, n: list) -> str:
        if o["output_type"] == "stream":
            return f'<pre class="output">{html.escape(_ANSI.sub("", "".join(o["text"])))}</pre>'
        if o["output_type"] == "error":
            tb = _ANSI.sub("", "\n".join(o.get("traceback", [])))
            return f'<pre class="output error">{html.escape(tb)}</pre>'
        data = o.get("data", {})
        for mime in ("image/png", "image/jpeg"):
            if mime in data:
                import base64

                n[0] += 1
                name = f"{stem}_files/figure-{n[0]}.{mime.split('/')[1]}"
                (files / name).parent.mkdir(parents=True, exist_ok=True)
                (files / name).write_bytes(base64.b64decode("".join(data[mime])))
                return f'<div class="figure"><img src="{name}" alt="figure {n[0]}"></div>'
        if "image/svg+xml" in data:
            return f'<div class="figure">{"".join(data["image/svg+xml"])}</div>'
        if "text/markdown" in data:
            body = self.md("".join(data["text/markdown"]))
            return body if asis else f'<div class="output">{body}</div>'
        if "text/html" in data:
            return f'<div class="output">{"".join(data["text/html"])}</div>'
        if "text/plain" in data:
            text = "".join(data["text/plain"])
            return f'<pre class="output">{html.escape(_ANSI.sub("", text))}</pre>' if text.strip() else ""
        return ""

    def notebook(self, page: Path, dest: Path) -> tuple[dict, str]:
        nb = json.loads(page.read_text())
        fm, parts, n = {}, [], [0]
        for c in nb["cells"]:
            src = "".join(c.get("source", ""))
            if c["cell_type"] == "raw":
                if not fm and src.lstrip().startswith("---"):
                    fm = _front(src)
                continue
            if c["cell_type"] == "markdown":
                if src.strip() and not (fm.get("title") and src.strip() == f"# {fm['title']}"):
                    parts.append(self.md(src))
                continue
            opts, lines = {}, src.splitlines()
            while lines and _DIRECTIVE.match(lines[0]):
                k, v = _DIRECTIVE.match(lines[0]).groups()
                opts[k] = v.lower()
                lines.pop(0)
            if opts.get("include") == "false":
                continue
            body = "\n".join(lines).strip()
            cell = []
            if body and opts.get("echo") != "false":
                cell.append(self.code(body))
            if opts.get("output") != "false":
                cell += [
                    self.output(o, opts.get("output") == "asis", dest.parent, dest.stem, n)
                    for o in c.get("outputs", [])
                ]
            if any(cell):
                parts.append('<div class="cell">' + "".join(cell) + "</div>")
        return fm, "\n".join(parts)

    def markdown(self, page: Path) -> tuple[dict, str]:
        text = page.read_text()
        return _front(text), self.md(_strip_front(text))

    def links(self, body: str, page_rel: str) -> str:
        "Links to staged pages (.md, .qmd, .ipynb) point at their HTML, as Quarto resolves them."
        here = Path(page_rel).parent

        def fix(m):
            href = m.group(2)
            if re.match(r"^[a-z]+:|^#|^/", href):
                return m.group(0)
            path, _, frag = href.partition("#")
            target = os.path.normpath((here / path).as_posix()) if path else ""
            if target in self.names:
                new = os.path.relpath(self.names[target], Path(self.names[page_rel]).parent.as_posix())
                return f'{m.group(1)}"{new}{"#" + frag if frag else ""}"'
            return m.group(0)

        return re.sub(r'(href=)"([^"]*)"', fix, body)

    def nav(self, page_rel: str) -> str:
        up = os.path.relpath(".", Path(self.names[page_rel]).parent.as_posix())
        up = "" if up == "." else up + "/"
        out = [f'<a class="brand" href="{up}index.html">{TITLE}</a>']
        for title, pages in self.sections:
            items = []
            for p in pages:
                rel = p.relative_to(self.proc).as_posix()
                cls = ' class="here"' if rel == page_rel else ""
                label = html.escape(self.titles.get(rel, rel))
                items.append(f'<li><a{cls} href="{up}{self.names[rel]}">{label}</a></li>')
            out.append(f"<h2>{html.escape(title)}</h2><ul>{''.join(items)}</ul>")
        return "\n".join(out)

    def render(self):
        if self.out.exists():
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        for d in (self.proc / "studies").iterdir():  # the runs' files beside their pages
            if d.is_dir():
                shutil.copytree(d, self.out / "studies" / d.name)
        bodies = {}
        for rel, name in self.names.items():
            page, dest = self.proc / rel, self.out / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            fm, body = self.notebook(page, dest) if page.suffix == ".ipynb" else self.markdown(page)
            self.titles[rel] = str(fm.get("title") or Path(rel).stem)
            bodies[rel] = (fm, body)
        for rel, (fm, body) in bodies.items():
            dest = self.out / self.names[rel]
            up = os.path.relpath(".", Path(self.names[rel]).parent.as_posix())
            css = ("" if up == "." else up + "/") + "site.css"
            desc = f'<p class="description">{self.md(str(fm["description"]))}</p>' if fm.get("description") else ""
            dest.write_text(
                PAGE.format(
                    title=html.escape(self.titles[rel]),
                    site=TITLE,
                    css=css,
                    nav=self.nav(rel),
                    desc=desc,
                    body=self.links(body, rel),
                )
            )
        from pygments.formatters import HtmlFormatter

        (self.out / "site.css").write_text(CSS + HtmlFormatter().get_style_defs(".highlight"))


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} – {site}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="{css}"></head>
<body><nav class="sidebar">{nav}</nav>
<main><h1 class="title">{title}</h1>{desc}
{body}
</main></body></html>
"""

CSS = """
body { margin: 0; font: 15px/1.55 system-ui, sans-serif; color: #222; display: flex; }
nav.sidebar { width: 17rem; flex: none; height: 100vh; overflow-y: auto; position: sticky; top: 0;
  padding: 1rem; box-sizing: border-box; background: #f6f7f9; border-right: 1px solid #ddd; font-size: 13px; }
nav.sidebar .brand { font-weight: 700; font-size: 18px; text-decoration: none; color: #2c3e50; }
nav.sidebar h2 { font-size: 12px; text-transform: uppercase; color: #666; margin: 1.2em 0 .3em; }
nav.sidebar ul { list-style: none; padding: 0; margin: 0; }
nav.sidebar a { color: #2a5db0; text-decoration: none; } nav.sidebar a.here { font-weight: 700; color: #000; }
main { flex: 1; min-width: 0; max-width: 60rem; padding: 1rem 2.5rem 4rem; }
h1.title { margin-bottom: .2em; } p.description, .description p { color: #555; font-size: 16px; margin-top: 0; }
pre, code { font-family: ui-monospace, monospace; font-size: 13px; }
pre { background: #f6f8fa; padding: .6em .8em; overflow-x: auto; border-radius: 4px; }
pre.output { background: #fff; border-left: 3px solid #ccd; } pre.error { border-left-color: #c33; }
.cell { margin: 1em 0; } .highlight pre { margin: 0; }
table { border-collapse: collapse; margin: 1em 0; font-size: 14px; }
th, td { border: 1px solid #ddd; padding: .3em .6em; vertical-align: top; } th { background: #f0f2f5; }
.figure img, main img { max-width: 100%; height: auto; }
a.anchor-link { visibility: hidden; margin-left: .3em; text-decoration: none; color: #999; }
h1:hover a.anchor-link, h2:hover a.anchor-link, h3:hover a.anchor-link, h4:hover a.anchor-link { visibility: visible; }
hr { border: 0; border-top: 1px solid #ddd; margin: 2em 0 1em; }
"""


def main(argv=None):
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "settings.ini")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / cfg["DEFAULT"].get("doc_path", "_docs")), help="the site (replaced)")
    ap.add_argument("--proc", default=str(ROOT / "_proc"), help="the staging folder (kept between builds)")
    ap.add_argument("--only", default="", help="comma-separated notebook stems: only these library pages")
    ap.add_argument("--scale", default="cpu", help="the scale whose study results get pages (default: cpu)")
    ap.add_argument("--renderer", choices=["auto", "quarto", "plain"], default="auto")
    ap.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    a = ap.parse_args(argv)
    t0 = time.time()
    os.chdir(ROOT)
    proc, out = Path(a.proc).resolve(), Path(a.out).resolve()
    sections = stage(proc, [s for s in a.only.split(",") if s] or None, a.scale, a.workers)
    quarto = find_quarto() if a.renderer in ("auto", "quarto") else None
    if a.renderer == "quarto" and not quarto:
        sys.exit("docs_site: no quarto executable (pip install quarto-cli)")
    if quarto:
        render_quarto(quarto, proc, out)
    else:
        Plain(proc, out, sections).render()
    n = len(list(out.rglob("*.html")))
    print(
        f"docs_site: {n} pages in {out} ({'quarto' if quarto else 'plain renderer: no quarto found'}), "
        f"{time.time() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
