"""Security tests of composer2.sandbox.bwrap: every attack runs in a real bubblewrap sandbox, and each test checks both
that it was contained and that the host is unchanged (files hashed before and after, host processes and sockets
watched from outside)."""

import hashlib, os, shutil, socket, subprocess, sys, threading, time, uuid
from pathlib import Path
import pytest
from composer2.core import C2Error
from composer2.config import SandboxConfig
from composer2.sandbox import bwrap as sbx
from composer2.sandbox.host import BWRAP_MISSING
from composer2.sandbox.bwrap import Sandbox, SandboxPool, sandbox_limits
from composer2.sandbox.paths import (
    list_beneath,
    printable,
    read_beneath,
    read_bytes_beneath,
    remove_beneath,
    replace_beneath,
    safe_path,
    write_beneath,
)
from composer2.sandbox.workspace import make_workspace, remove_workspace

need_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason=BWRAP_MISSING)
LIMITS = SandboxConfig(
    timeout=5, cpu_seconds=3, memory_mb=256, max_processes=32, file_size_mb=4, tmp_mb=16, max_output=4096
)


@pytest.fixture
def ws():
    w = make_workspace({"hello.py": "print('hello')\n", "pkg/data.txt": "data\n"})
    yield w
    remove_workspace(w)


@pytest.fixture
def sb(ws):
    return Sandbox(ws, LIMITS)


def digest(*paths) -> dict:
    "Content hash of files, listing of directories: what 'the host is unchanged' compares."
    out = {}
    for p in map(Path, paths):
        if p.is_dir():
            out[str(p)] = sorted(os.listdir(p))
        elif p.exists():
            out[str(p)] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_uid, p.stat().st_mode)
        else:
            out[str(p)] = None
    return out


def host_pids(marker: str) -> list[int]:
    "Host processes whose command line contains `marker`."
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                if marker.encode() in Path(f"/proc/{d}/cmdline").read_bytes():
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def test_unavailable_without_bwrap(tmp_path):
    # the real lookup in a real interpreter whose PATH has no bwrap: no mock
    code = "from composer2.sandbox.workspace import make_workspace\nfrom composer2.sandbox.bwrap import Sandbox\ntry: Sandbox(make_workspace({}))\nexcept Exception as e: print(type(e).__name__, e)"
    r = subprocess.run(
        [sys.executable, "-c", code], env={"PATH": str(tmp_path)}, capture_output=True, text=True, timeout=60
    )
    assert r.stdout.strip() == f"SandboxUnavailable {BWRAP_MISSING}", (r.stdout, r.stderr)


@need_bwrap
def test_runs_unprivileged(sb, ws):
    marker = uuid.uuid4().hex
    seen = {}

    def watch():  # from the host: the sandboxed process's real uid and capabilities
        for _ in range(200):
            for pid in host_pids(marker):
                try:
                    if Path(f"/proc/{pid}/comm").read_text().strip() not in ("bash", "sleep"):
                        continue  # not our launcher
                    seen.update(
                        l.split(":\t")
                        for l in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if l.startswith(("Uid", "CapEff", "NoNewPrivs"))
                    )
                except OSError:
                    continue
                if seen:
                    return
            time.sleep(0.01)

    t = threading.Thread(target=watch)
    t.start()
    r = sb.run(f"sleep 0.6 # {marker}\nid -u; pwd; su -c id root </dev/null 2>&1; unshare --user true 2>&1; echo rc=$?")
    t.join()
    assert (
        r.stdout.startswith("1000\n/workspace\n") and "uid=0" not in r.stdout and r.stdout.strip().endswith("rc=1")
    ), r
    assert seen and seen["Uid"].split()[0] == str(sbx.SANDBOX_UID if os.geteuid() == 0 else os.getuid()), seen
    assert int(seen["CapEff"], 16) == 0 and seen["NoNewPrivs"] == "1"


@need_bwrap
def test_no_network(sb):
    host = socket.create_server(("127.0.0.1", 0))
    host.settimeout(1.0)
    port = host.getsockname()[1]
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(b"\0c2-sandbox-test-" + uuid.uuid4().hex.encode())
    abstract.listen()
    name = abstract.getsockname()[1:].decode()
    probe = f"""
import socket
def attempt(f):
    try: f(); return "OPEN"
    except OSError as e: return type(e).__name__
print("dns", attempt(lambda: socket.getaddrinfo("example.com", 80)))
print("loopback", attempt(lambda: socket.create_connection(("127.0.0.1", {port}), 1)))
print("outside", attempt(lambda: socket.create_connection(("1.1.1.1", 53), 1)))
print("raw", attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)))
print("packet", attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)))
print("abstract", attempt(lambda: socket.socket(socket.AF_UNIX).connect(b"\\0{name}")))
print("ifaces", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]))
"""
    try:
        r = sb.run(["python3", "-c", probe])
        out = dict(l.split(" ", 1) for l in r.stdout.splitlines())
        assert out["dns"] == "gaierror" and out["loopback"] == "ConnectionRefusedError", r
        assert out["outside"] == "OSError" and out["raw"] == out["packet"] == "PermissionError", r
        assert out["abstract"] == "ConnectionRefusedError" and out["ifaces"] == "['lo']", r
        with pytest.raises(socket.timeout):
            host.accept()  # the host server saw nobody
        abstract.settimeout(0.1)
        with pytest.raises(socket.timeout):
            abstract.accept()
    finally:
        host.close()
        abstract.close()


@need_bwrap
def test_cannot_read_host_files_or_secrets(sb, ws, tmp_path, monkeypatch):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-file\n")
    other = make_workspace({"theirs.txt": "TOPSECRET-other-workspace\n"})
    monkeypatch.setenv("C2_TEST_TOKEN", "TOPSECRET-env")
    project = Path(__file__).resolve().parents[1]
    before = digest(secret, other / "theirs.txt", "/etc/shadow", project / "README.md")
    try:
        paths = [
            secret,
            f"{other}/theirs.txt",
            other,
            "/etc/shadow",
            f"{project}/README.md",
            "/work",
            "/home",
            "/root/.bashrc",
            "/proc/1/root/work",
            "/proc/self/root/root/.bashrc",
            "/sys/class/net",
        ]
        cmd = (
            f"for p in {' '.join(map(str, paths))}; do cat $p 2>&1 || ls $p 2>&1; done; "
            "ls -A /root /root/.pyenv /root/.pyenv/versions; env; tr '\\0' '\\n' </proc/1/environ; cat /etc/passwd"
        )
        r = Sandbox(ws, LIMITS).run(cmd)
        assert "TOPSECRET" not in r.stdout + r.stderr, r
        for p in paths:
            assert f"ls: cannot access '{p}': No such file or directory" in r.stdout, (p, r.stdout)
        assert (
            "/root:\n.pyenv\n\n/root/.pyenv:\nversions\n\n/root/.pyenv/versions:\n" + Path(sys.base_prefix).name
            in r.stdout
        )
        env = {l.split("=", 1)[0] for l in r.stdout.splitlines() if "=" in l and l.split("=", 1)[0].isupper()}
        assert env <= {
            "PATH",
            "HOME",
            "LANG",
            "USER",
            "TMPDIR",
            "PWD",
            "SHLVL",
            "PYTHONDONTWRITEBYTECODE",
            "PYTHONNOUSERSITE",
        }, env
        assert "root:x:0:0:root:/nonexistent" in r.stdout  # the synthetic /etc, not the host's
        assert digest(secret, other / "theirs.txt", "/etc/shadow", project / "README.md") == before
    finally:
        remove_workspace(other)


@need_bwrap
def test_cannot_write_outside_workspace(sb, ws, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target.txt"
    target.write_text("original\n")
    watched = [ws.parent, "/etc/passwd", "/etc/hosts", target, outside, Path(sys.base_prefix) / "bin"]
    before = digest(*watched)
    cmds = [
        "echo x > /etc/passwd",
        "echo x > /usr/x",
        "echo x > /x",
        "echo x > /root/x",
        "echo x > ../x",
        "echo x > /workspace/../x",
        f"echo x > {target}",
        f"mkdir -p {outside} && echo x > {target}",
        f"echo x > {sys.base_prefix}/bin/x",
        "echo x > /proc/1/root/x",
        "echo x > /dev/x",
        "ln -s /etc/passwd pw && echo x >> pw",
        f"ln -s {target} tgt && echo x > tgt",
        "ln -s ../../../.. up && echo x > up/x",
        f"ln -s {outside} outdir && echo x > outdir/new.txt",
    ]
    for c in cmds:
        r = sb.run(c)
        assert r.returncode != 0 or c.startswith(("mkdir", "ln -s ../../", f"ln -s {target}", f"ln -s {outside}")), (
            c,
            r,
        )
    r = sb.run("ls /tmp; cat up/x 2>&1")  # what did succeed landed in this run's tmpfs or the sandbox's own root view
    assert digest(*watched) == before, "a host file changed"
    # the symlinks left in the workspace must not steer host-side code out of it either
    assert os.readlink(ws / "pw") == "/etc/passwd" and os.readlink(ws / "tgt") == str(target)
    for rel in ["pw", "tgt", "up/x", "outdir/new.txt", "/etc/passwd", "../x"]:
        with pytest.raises(C2Error):
            safe_path(ws, rel)
        with pytest.raises(C2Error):
            write_beneath(ws, rel, "pwned\n")
    with pytest.raises(C2Error):
        read_beneath(ws, "pw")
    sb.run("true")  # run() hands files to the sandbox user...
    assert digest(*watched) == before and target.stat().st_uid == os.geteuid()  # ...without following links out
    write_beneath(ws, "pkg/new.txt", "fine\n")
    assert read_beneath(ws, "/workspace/pkg/new.txt") == "fine\n"


@need_bwrap
def test_proc_shows_only_the_sandbox(sb):
    r = sb.run(
        f"ls /proc | grep -c '^[0-9]'; cat /proc/{os.getpid()}/cmdline 2>&1 | tr '\\0' ' '; echo; "
        "tr '\\0' ' ' </proc/1/cmdline; echo; ls /proc/1/root/ /proc/self/root/; ls /proc/1/root/work 2>&1"
    )
    lines = r.stdout.splitlines()
    assert int(lines[0]) <= 6, r.stdout  # bwrap's init, bash, ls, grep...
    assert "pytest" not in r.stdout and "No such file" in lines[-1], r.stdout
    assert "/workspace" not in lines[2] or "bwrap" in lines[2], lines[2]  # pid 1 is the sandbox's own init


@need_bwrap
def test_fork_bomb_is_contained(ws):
    lim = SandboxConfig(**{**vars(LIMITS), "max_processes": 24, "timeout": 3})
    marker = "bomb" + uuid.uuid4().hex[:12]
    peak, lat, stop = [0], [], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], len(host_pids(marker)))
            t = time.perf_counter()
            subprocess.run(["true"])
            lat.append(time.perf_counter() - t)
            time.sleep(0.05)

    t = threading.Thread(target=watch)
    t.start()
    try:
        r = Sandbox(ws, lim).run(f": {marker}; b() {{ b | b & }}; b; sleep 10")
    finally:
        stop.set()
        t.join()
    assert r.timed_out or r.returncode != 0, r
    assert 0 < peak[0] <= 24, peak  # never more than max_processes alive
    assert max(lat) < 2.0, max(lat)  # the host kept spawning processes
    assert host_pids(marker) == []  # and nothing of it survived the run


@need_bwrap
def test_memory_bomb(sb):
    for cmd in ["python3 -c 'x = bytearray(2 << 30)'", "python3 -c 'x = [bytearray(8 << 20) for _ in range(1000)]'"]:
        r = sb.run(cmd)
        assert r.returncode == 1 and r.killed_by == "memory" and "MemoryError" in r.stderr and not r.timed_out, r


@need_bwrap
def test_disk_fill(sb, ws):
    r = sb.run("head -c 64M /dev/zero > big")
    assert r.killed_by == "SIGXFSZ" and (ws / "big").stat().st_size <= 4 << 20, r
    r = sb.run("python3 -c \"open('big2', 'wb').write(bytes(8 << 20))\"")
    assert r.returncode == 1 and "File too large" in r.stderr and (ws / "big2").stat().st_size <= 4 << 20, r
    for d in ["/tmp", "/dev/shm"]:
        r = sb.run(f"for i in $(seq 10); do head -c 3M /dev/zero > {d}/f$i || break; done; du -sk {d}")
        assert "No space left on device" in r.stderr and int(r.stdout.split()[0]) <= 16 * 1024, r
    assert sb.run("ls -A /tmp /dev/shm").stdout == "/dev/shm:\n\n/tmp:\n"  # a fresh /tmp every run


@need_bwrap
def test_infinite_loop_cpu_limit_and_timeout(ws):
    lim = SandboxConfig(**{**vars(LIMITS), "cpu_seconds": 1, "timeout": 10})
    r = Sandbox(ws, lim).run(["python3", "-c", "while True: pass"])
    # stopped by CPU time, not the clock: a one-thread loop reaches 1 s of CPU no sooner than 1 s of wall time. cpu_s of
    # a killed command is a lower bound (RunResult), 0.78 s beside a busy study, so it bounds the time from above only.
    assert r.killed_by == "SIGXCPU" and not r.timed_out and r.wall_s > 0.95 and r.cpu_s < 3, r
    r = Sandbox(ws, lim).run("while :; do sleep 0.05; done", timeout=0.5)  # idle: only the wall clock stops it
    assert r.timed_out and r.killed_by == "timeout" and r.wall_s < 2, r


@need_bwrap
def test_no_process_outlives_run(sb):
    m = uuid.uuid4().hex[:10]
    # daemons: background, double fork, setsid, nohup with closed descriptors; the main command exits at once
    daemons = (
        f"(sleep 61.{m}1 &); setsid sleep 61.{m}2 </dev/null >/dev/null 2>&1 & nohup sleep 61.{m}3 >/dev/null 2>&1 & "
        f"python3 -c \"import os, time\nif os.fork() == 0:\n  os.setsid()\n  if os.fork() == 0:\n    os.closerange(0, 1000); os.execvp('sleep', ['sleep', '61.{m}4'])\""
    )
    t = time.monotonic()
    r = sb.run(daemons + "; echo started")
    assert r.ok and r.stdout == "started\n" and time.monotonic() - t < 3, r
    assert host_pids(m) == []
    r = sb.run(daemons + "; sleep 100", timeout=1)  # and the same when the timeout kills it
    assert r.timed_out and host_pids(m) == [], r


@need_bwrap
def test_huge_output(sb):
    t = time.monotonic()
    r = sb.run(
        [
            "python3",
            "-c",
            "import sys\nfor _ in range(40):\n sys.stdout.write('o' * (1 << 20)); sys.stderr.write('e' * (1 << 20))\nprint('END')",
        ]
    )
    assert r.ok and r.truncated and time.monotonic() - t < 5, r.returncode
    for text, ch in [(r.stdout, "o"), (r.stderr, "e")]:
        assert len(text) <= 4096 + 80 and text.startswith(ch * 100) and "output truncated" in text
    assert r.stdout.endswith("END\n")  # the end is kept, not just the start
    r = sb.run("yes")  # endless: killed once it passes OUTPUT_KILL_BYTES
    assert r.killed_by == "output" and r.truncated and r.wall_s < 5, r


@need_bwrap
def test_signals_do_not_reach_the_host(sb):
    canary = subprocess.Popen(
        ["sleep", "30"], **({"user": sbx.SANDBOX_UID, "group": sbx.SANDBOX_UID} if os.geteuid() == 0 else {})
    )
    try:
        # kill(-1) reaches every process the caller may signal except itself: here, only the sandbox's own
        r = sb.run(
            f"sleep 30 & kill -9 1; kill -9 $PPID; kill -9 {canary.pid} {os.getpid()} 2>&1; kill -TERM -1; kill -9 -1; "
            "wait; echo done",
            timeout=10,
        )
        assert r.ok and r.stdout.count("No such process") == 2 and r.stdout.endswith("done\n") and r.wall_s < 5, r
        time.sleep(0.2)
        assert canary.poll() is None  # a host process of the very same uid
    finally:
        canary.kill()
        canary.wait()


@need_bwrap
def test_pool_runs_concurrently_and_apart():
    wss = [make_workspace({"mine": f"{i}\n"}) for i in range(6)]
    try:
        with SandboxPool(6) as pool:
            t = time.monotonic()
            rs = pool.run_many([(Sandbox(w, LIMITS), "sleep 0.5; cat mine; ls", 5) for w in wss])
            dt = time.monotonic() - t
        assert [r.stdout for r in rs] == [f"{i}\nmine\n" for i in range(6)] and dt < 2.0, (dt, rs)
    finally:
        for w in wss:
            remove_workspace(w)


@need_bwrap
def test_stdin_and_bad_arguments(sb):
    assert sb.run("wc -l", stdin="a\nb\n" * 100_000).stdout.strip() == "200000"
    for bad in [dict(cmd=[]), dict(cmd="true", timeout=-1), dict(cmd=["ok", 3])]:
        with pytest.raises(C2Error):
            sb.run(**bad)
    with pytest.raises(C2Error):
        Sandbox("/nonexistent/dir")


@need_bwrap
def test_files_from_host_tools_stay_usable(sb, ws):
    (ws / "from_tool.txt").write_text("x\n")  # written by root, as the tools do
    r = sb.run("echo y >> from_tool.txt && rm pkg/data.txt && mkdir -p new/sub && echo z > new/sub/f")
    assert r.ok, r
    assert (
        (ws / "from_tool.txt").read_text() == "x\ny\n"
        and not (ws / "pkg/data.txt").exists()
        and (ws / "new/sub/f").exists()
    )


# ---- issue 16: one safe way in for host code, whole-sandbox limits, nothing left behind


def test_host_side_access_never_follows_blocks_or_overreads(tmp_path):
    "The readers refuse links out, FIFOs, devices and oversized files without blocking; replace_beneath clears the way."
    ws = tmp_path / "ws"
    ws.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "s").write_text("SECRET\n")
    (ws / "a.py").write_text("x = 1\n")
    os.mkfifo(ws / "fifo")
    os.symlink(out, ws / "o")
    os.symlink("/dev/zero", ws / "zero")
    os.symlink("l2", ws / "l1")
    os.symlink("l1", ws / "l2")
    (ws / "big").write_bytes(bytes(3 << 20))
    t0 = time.monotonic()
    for rel in ["fifo", "o/s", "zero", "l1", "big", "\ud800", "a\0b"]:
        with pytest.raises((C2Error, OSError)):
            read_bytes_beneath(ws, rel)
        if rel != "big":
            with pytest.raises((C2Error, OSError)):
                write_beneath(ws, rel, "x")
    assert (
        time.monotonic() - t0 < 2
        and (out / "s").read_text() == "SECRET\n"
        and read_bytes_beneath(ws, "big", 4 << 20) == bytes(3 << 20)
    )
    assert list_beneath(ws) == ["a.py"] and list_beneath(ws, max_bytes=None) == ["a.py", "big"]
    for rel in ["fifo", "o", "l1"]:  # the judge's restore: whatever stands there goes
        replace_beneath(ws, rel + "/t.py" if rel == "o" else rel, "pristine\n")
    assert (ws / "fifo").read_text() == "pristine\n" and (ws / "o").is_dir() and not (ws / "o").is_symlink()
    assert (
        (ws / "o/t.py").read_text() == "pristine\n"
        and (out / "s").read_text() == "SECRET\n"
        and sorted(os.listdir(out)) == ["s"]
    )
    assert remove_beneath(ws, "o") and not remove_beneath(ws, "o") and (out / "s").exists()
    assert printable("caf\udce9") == "caf\ufffd"


@need_bwrap
def test_bad_commands_raise_before_anything_starts(sb):
    for bad in [dict(cmd="echo \0"), dict(cmd=["echo", "\ud800"]), dict(cmd="cat", stdin="\udcff")]:
        with pytest.raises(C2Error):
            sb.run(**bad)
    assert sb.run(["echo", "caf\udce9"]).stdout == "caf\ufffd\n"  # surrogateescape: a byte, passed as such


@need_bwrap
def test_stdin_is_read_once(sb):
    "Small stdin is a pipe: what the command read, nothing else in the sandbox can read again (the judge's key goes this way)."
    r = sb.run(
        "head -c 5; echo; cat /proc/1/fd/0 2>&1 | head -c 20; echo; ls -l /proc/self/fd/ | grep -c memfd",
        stdin="hello-secret",
    )
    assert r.stdout.startswith("hello\n") and "secret" not in r.stdout.split("\n", 1)[1], r


def workspace_mounts(w: Path) -> list[str]:
    'The filesystems mounted at `w` ("FSTYPE SOURCE"), from this process\'s mount table.'
    rows = [line.split(" - ") for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [" ".join(tail.split()[:2]) for head, tail in rows if head.split()[4] == str(w)]


@need_bwrap
def test_limits_apply_to_the_whole_sandbox_and_are_cleaned_up(ws):
    lim = sandbox_limits()
    cfg = SandboxConfig(**{**vars(LIMITS), "timeout": 20, "memory_mb": 200, "max_open_files": 32})
    if lim["cgroups"]:
        r = Sandbox(ws, SandboxConfig(**{**vars(cfg), "max_open_files": 256})).run(
            [
                "python3",
                "-c",
                "import os\nfds = [os.memfd_create('m') for _ in range(100)]\n"
                "for fd in fds: os.write(fd, bytes(3 << 20))\nprint('held 300 MiB')",
            ]
        )
        assert r.killed_by == "memory" and "held" not in r.stdout, (
            r
        )  # 100 x 3 MiB of memfd pages: no rlimit counts them
        for c, d in lim["cgroups"].items():
            assert [p for p in Path(d).iterdir() if p.is_dir()] == [], c
    if lim["workspace_tmpfs"]:
        w = make_workspace({"x": "1\n"}, limits=cfg)
        assert workspace_mounts(w) == ["tmpfs c2-workspace"]  # this workspace's own (other runs may hold theirs)
        remove_workspace(w)
        assert workspace_mounts(w) == []
    assert (
        lim["seccomp"]
        and Sandbox(ws, cfg)
        .run('python3 -c "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE))"')
        .stdout
        == "(32, 32)\n"
    )
