"""`make lab` starts JupyterLab on 127.0.0.1 with a token and the project's kernel: /api/status answers 200 with the
token and 403 without, an executed study notebook opens through the contents API, and the server stops by PID. Without
TOKEN the URL `make lab` prints is the one it serves."""

import json, os, re, secrets, shutil, signal, socket, subprocess, time, urllib.error, urllib.parse, urllib.request
from pathlib import Path
import pytest
from conftest import ROOT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, token=None):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def children(pid):
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def test_lab_token_and_executed_notebook(tmp_path):
    out = tmp_path / "kl"  # an executed study notebook, as `c2 study run` writes it (the committed cpu result)
    out.mkdir()
    shutil.copy(ROOT / "studies" / "results" / "length_penalty" / "cpu" / "length_penalty.ipynb", out)
    port, token = free_port(), secrets.token_hex(16)
    make = subprocess.Popen(
        ["make", "-s", "lab", f"PORT={port}", f"TOKEN={token}", f"LAB_DIR={tmp_path}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, code = time.time() + 60, None
        while time.time() < deadline and code != 200:
            assert make.poll() is None, make.stdout.read()
            try:
                code, _ = get(f"{base}/api/status", token)
            except OSError:
                time.sleep(0.3)
        assert code == 200, "JupyterLab did not answer in 60s"
        assert get(f"{base}/api/status")[0] == 403
        assert get(f"{base}/api/status", "wrong-token")[0] == 403
        code, body = get(f"{base}/api/contents/kl/length_penalty.ipynb?content=1", token)
        assert code == 200
        nb = json.loads(body)
        assert nb["type"] == "notebook" and any(c.get("outputs") for c in nb["content"]["cells"])
        code, body = get(f"{base}/api/kernelspecs", token)
        assert code == 200 and json.loads(body)["default"] == "composer2"
    finally:
        stop(make)
    with pytest.raises(OSError):
        get(f"{base}/api/status", token)


def test_lab_prints_the_url_it_serves(tmp_path):
    "Without TOKEN, `make lab` draws one token, prints its URL, and that URL opens JupyterLab (not the login page)."
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "TOKEN"}
    make = subprocess.Popen(
        ["make", "-s", "lab", f"PORT={port}", f"LAB_DIR={tmp_path}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        line = make.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:(\d+)/lab\?token=([0-9a-f]+))\s*$", line)
        assert m and int(m.group(2)) == port, line
        url, token = m.group(1), m.group(3)
        deadline, code = time.time() + 60, None
        while time.time() < deadline and code != 200:
            assert make.poll() is None, line + make.stdout.read()
            try:
                code, _ = get(f"http://127.0.0.1:{port}/api/status", token)
            except OSError:
                time.sleep(0.3)
        assert code == 200, f"the token in the printed URL is refused ({code}): {line}"
        with urllib.request.urlopen(url, timeout=10) as r:  # the URL as a browser opens it: JupyterLab, no login page
            assert r.status == 200 and urllib.parse.urlparse(r.geturl()).path == "/lab", r.geturl()
            assert b"JupyterLab" in r.read()
    finally:
        stop(make)


def stop(make):
    "Stop `make lab` by PID: the server is make's child (the recipe's shell execs it); then make itself exits."
    for pid in children(make.pid):
        os.kill(pid, signal.SIGTERM)
    try:
        make.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for pid in children(make.pid):
            os.kill(pid, signal.SIGKILL)
        make.kill()
        make.wait()
