"""The docs site (`make docs`, tools/docs_site.py), built fresh into a temporary folder and opened in headless Chromium
over HTTP: every HTML page loads (status 200, a title), logs no console error, raises nothing, and every <img> has
loaded (naturalWidth > 0); every relative link points at a file of the site. Chromium is driven through the DevTools
protocol (websocket-client, which Jupyter already installs).

The quick test builds the landing page, the guides, every study page and two library notebooks; the slow one builds
the whole library. The site is rendered by Quarto where a `quarto` executable is found, else by the script's plain
renderer (Quarto cannot be installed where GitHub is unreachable, as in CI): see tools/docs_site.py."""

import http.server, json, re, shutil, subprocess, sys, threading, time
from functools import partial
from pathlib import Path
import pytest
from conftest import ROOT

BUILD = ROOT / "tools" / "docs_site.py"
QUICK_NOTEBOOKS = "00_core,02_stats"


def browser() -> str:
    b = shutil.which("chromium") or shutil.which("chromium-browser")
    if not b:
        pytest.skip("Chromium is not installed (make setup installs Debian's chromium as root)")
    return b


def build(tmp: Path, *args) -> Path:
    out = tmp / "site"
    r = subprocess.run(
        [sys.executable, str(BUILD), "--out", str(out), "--proc", str(tmp / "proc"), *args],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "docs_site: " in r.stdout and (out / "index.html").exists(), r.stdout
    return out


class Server:
    "The site over HTTP on 127.0.0.1 (a free port), recording every request that did not answer 200 or 304."

    def __init__(self, root: Path):
        self.failed = []
        failed = self.failed

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_request(self, code="-", size="-"):
                if str(code) not in ("200", "304"):
                    failed.append((self.path, code))

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Chromium:
    "Headless Chromium with one page, driven over the DevTools protocol."

    def __init__(self, exe: str, profile: Path):
        import websocket

        self.proc = subprocess.Popen(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file, deadline = profile / "DevToolsActivePort", time.time() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.time() < deadline and self.proc.poll() is None, "Chromium did not start"
            time.sleep(0.1)
        port = port_file.read_text().split()[0]
        import urllib.request

        deadline = time.time() + 30
        while True:
            try:
                targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5))
                page = next(t for t in targets if t["type"] == "page")
                break
            except Exception:
                assert time.time() < deadline, "no page target in Chromium"
                time.sleep(0.2)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60)
        self.n, self.events = 0, []
        for m in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
            self.call(m)

    def call(self, method, **params):
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                assert "error" not in msg, (method, msg["error"])
                return msg.get("result", {})
            self.events.append(msg)

    def wait_event(self, name, timeout=60):
        deadline = time.time() + timeout
        for i, e in enumerate(self.events):
            if e.get("method") == name:
                return self.events.pop(i)
        self.ws.settimeout(1)
        try:
            while time.time() < deadline:
                try:
                    msg = json.loads(self.ws.recv())
                except Exception:
                    continue
                if msg.get("method") == name:
                    return msg
                self.events.append(msg)
        finally:
            self.ws.settimeout(60)
        raise AssertionError(f"no {name} within {timeout} s")

    def visit(self, url) -> dict:
        "Load url; its HTTP status, title, images [src, naturalWidth] and console errors / exceptions."
        self.events.clear()
        nav = self.call("Page.navigate", url=url)
        assert not nav.get("errorText"), (url, nav)
        self.wait_event("Page.loadEventFired")
        js = """(async () => {
          const imgs = [...document.images];
          imgs.forEach(i => { i.loading = "eager"; });
          await Promise.all(imgs.map(i => i.complete ? 0 : new Promise(r => { i.onload = i.onerror = r; })));
          await new Promise(r => setTimeout(r, 200));
          const images = imgs.map(i => [i.getAttribute("src"), i.naturalWidth]);
          return JSON.stringify({title: document.title, images});
        })()"""
        res = json.loads(
            self.call("Runtime.evaluate", expression=js, awaitPromise=True, returnByValue=True)["result"]["value"]
        )
        self.call("Runtime.evaluate", expression="1")  # collect the events logged so far
        status = next(
            (
                e["params"]["response"]["status"]
                for e in self.events
                if e.get("method") == "Network.responseReceived" and e["params"]["type"] == "Document"
            ),
            None,
        )
        errors = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
                errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p["args"]))
            elif m == "Runtime.exceptionThrown":
                errors.append(
                    "exception: "
                    + p["exceptionDetails"].get("text", "")
                    + " "
                    + str(p["exceptionDetails"].get("exception", {}).get("description", ""))
                )
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")
        return dict(res, status=status, errors=errors)

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def relative_links(site: Path) -> list:
    "Relative href/src of every page (real attributes, parsed) whose target file is missing from the site."
    from html.parser import HTMLParser

    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.links = []

        def handle_starttag(self, tag, attrs):
            self.links += [v for k, v in attrs if k in ("href", "src") and v]

    bad = []
    for page in site.rglob("*.html"):
        parser = Links()
        parser.feed(page.read_text(errors="replace"))
        for link in parser.links:
            link = re.split(r"[#?]", link)[0]
            if not link or re.match(r"^[a-zA-Z][\w+.-]*:", link) or link.startswith("//"):
                continue
            target = (site / link.lstrip("/")) if link.startswith("/") else (page.parent / link)
            if not target.exists():
                bad.append((str(page.relative_to(site)), link))
    return bad


def check_site(site: Path, tmp: Path, built: set | None = None):
    """Every page in Chromium, and every relative link. `built`: the library notebooks built (None: all); a link to
    one left out of the build is allowed."""
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    bad = [
        (page, link)
        for page, link in relative_links(site)
        if not (
            built is not None
            and re.fullmatch(r"\d\d_\w+\.ipynb", Path(link).name)
            and Path(link).stem not in built
            and (ROOT / "nbs" / Path(link).name).exists()
        )
    ]
    assert not bad, bad[:20]
    server, chrome = Server(site), Chromium(browser(), tmp / "profile")
    try:
        problems, n_img = [], 0
        for rel in pages:
            r = chrome.visit(server.url + rel)
            n_img += len(r["images"])
            if r["status"] != 200 or not r["title"].strip():
                problems.append((rel, "status/title", r["status"], r["title"]))
            if r["errors"]:
                problems.append((rel, "errors", r["errors"][:5]))
            if broken := [s for s, w in r["images"] if not w > 0]:
                problems.append((rel, "images", broken))
        assert not problems, problems[:20]
        assert not server.failed, server.failed[:20]
    finally:
        chrome.close()
        server.close()
    return pages, n_img


def test_docs_site_in_chromium(tmp_path):
    "Landing page, guides, every study page and two library notebooks: each loads clean in a real browser."
    browser()
    site = build(tmp_path, "--only", QUICK_NOTEBOOKS)
    pages, n_img = check_site(site, tmp_path, set(QUICK_NOTEBOOKS.split(",")))
    from composer2.studies.registry import STUDIES

    assert {"index.html", "core.html", "stats.html", "studies/index.html"} <= set(pages), pages
    assert {f"studies/{s}.html" for s in STUDIES} <= set(pages), pages
    guides = {f"guides/{p.stem}.html" for p in (ROOT / "nbs" / "guides").glob("*.md")}
    assert guides and guides <= set(pages), (guides, pages)
    # every study with a cpu run shows its figures (one image or more), its verdicts and its supporting checks
    for s in STUDIES:
        text = (site / "studies" / f"{s}.html").read_text()
        if (ROOT / "studies" / "results" / s / "cpu" / "results.json").exists():
            assert "<img" in text and "claims:" in text and "Supporting checks:" in text, s
            assert f"{s}/results.json" in text, s
    assert n_img >= len(STUDIES)
    # the library reference: show_doc rendered (a heading per documented name), the export cells' source folded away
    core = (site / "core.html").read_text()
    assert 'id="atomic_write"' in core and "atomic_write" in core and "__all__" not in core


@pytest.mark.slow
def test_whole_docs_site_in_chromium(tmp_path):
    "The whole site, every library notebook included (minutes: nbdev runs each notebook's export cells)."
    browser()
    site = build(tmp_path)
    pages, _ = check_site(site, tmp_path)
    n_nbs = len([p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith("_")])
    assert len(pages) >= n_nbs + 2, pages
