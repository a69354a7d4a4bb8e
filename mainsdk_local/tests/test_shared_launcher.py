"""``sandbox.local.launcher: shared``: sessions, paused sessions and snapshots reached from the user's other
processes, within their tenant only; a private launcher keeps its sessions to its process; another user is refused.

Process A is a real separate Python process with its own main.yaml; this test process is the other one (B). Both
find the shared launcher in the same per-user folder (``XDG_RUNTIME_DIR``), here a fresh one per test.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION, NO_SESSION, ConfigError
from mainsdk_local.config import LocalPrograms
from mainsdk_local.driver import driver_from_config
from mainsdk_local.launcher import shared as server_side
from mainsdk_local.launcher_client import Launcher, LauncherError

from mainsdk_local import local_sandbox_driver, shared_launcher

SHARED = "sandbox: {driver: local, local: {launcher: shared, pool: 0}, limits: {timeout: 10s}}\n"
PRIVATE = "sandbox: {driver: local, local: {pool: 0}, limits: {timeout: 10s}}\n"

# Process A: opens what the test asks for, says its ids, waits for a line, writes once more, exits without closing.
OPENER = """
import json, sys
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_local.driver import driver_from_config
config = load_config_text(sys.argv[1])
sandbox = Sandbox(SandboxDeps(config=config, driver=driver_from_config(config), load_entrypoints=False,
                              tenancy=lambda: "acme"))
session = sandbox.create()
session.write("a.txt", "from-a\\n")
ids = {"session": session.id}
if sys.argv[2] == "all":
    ids["snapshot"] = session.snapshot().id
    paused = sandbox.create()
    paused.write("p.txt", "kept\\n")
    paused.pause()
    ids["paused"] = paused.id
print(json.dumps(ids), flush=True)
sys.stdin.readline()
session.write("again.txt", "a-still-here\\n")  # A's own channel works after B reached the box
print("done", flush=True)
"""


@pytest.fixture
def folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh XDG_RUNTIME_DIR (short: a socket path has 107 bytes); its shared launcher is stopped after."""
    runtime = tempfile.mkdtemp(prefix="ms-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    yield runtime
    launcher = Launcher(shared=True, pool=0)
    try:
        place = os.path.join(runtime, "mainsdk")
        if os.path.isdir(place) and any(name.endswith(".sock") for name in os.listdir(place)):
            launcher.stop_shared()
    finally:
        launcher.close()
        shutil.rmtree(runtime, ignore_errors=True)


def sandbox_for(text: str, tenant: str) -> Sandbox:
    config = load_config_text(text)
    deps = SandboxDeps(config=config, driver=driver_from_config(config), load_entrypoints=False, tenancy=lambda: tenant)
    return Sandbox(deps)


def opener(text: str, what: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", OPENER, text, what], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "process A failed (its stderr is above)"
    ids: dict[str, str] = json.loads(line)
    return proc, ids


def finish(proc: subprocess.Popen[str]) -> None:
    out, _ = proc.communicate("go\n", timeout=60)
    assert out.strip() == "done" and proc.returncode == 0


def refused(call: Any) -> SandboxError:
    with pytest.raises(SandboxError) as caught:
        call()
    assert caught.value.code == NO_SESSION
    return caught.value


def test_sessions_paused_sessions_and_snapshots_outlive_their_process_within_their_tenant(folder: str) -> None:
    b = sandbox_for(SHARED, "acme")
    caps = b.capabilities()
    if "filesystem" not in caps.checkpoint_kinds or not caps.pause:
        pytest.skip("the launcher has no overlayfs layers or cgroup freezer here (it needs root and namespaces)")
    proc, ids = opener(SHARED, "all")
    try:
        # B reaches A's session while A holds it: the files and a command work, and A goes on with its own.
        session = b.get(ids["session"])
        assert session.read("a.txt") == b"from-a\n"
        assert session.run("bash", ["-c", "cat a.txt; echo from-b > b.txt"]).stdout == "from-a\n"
        finish(proc)
        # A has exited without closing: the session is still there, with what both wrote.
        assert session.run("bash", ["-c", "cat again.txt b.txt"]).stdout == "a-still-here\nfrom-b\n"
        # Another tenant: the same 0008 as an unknown id, for the session, the paused one and the snapshot.
        other = sandbox_for(SHARED, "globex")
        try:
            unknown = refused(lambda: other.get("ses_" + "0" * 24))
            assert refused(lambda: other.get(ids["session"])).message.replace(ids["session"], "X") == (
                unknown.message.replace("ses_" + "0" * 24, "X")
            )
            refused(lambda: other.resume(ids["paused"]))
            refused(lambda: other.create(snapshot=ids["snapshot"]))
            refused(lambda: other.delete_snapshot(ids["snapshot"]))
        finally:
            other.close()
        # The paused session says so, and resumes here with its files.
        assert "is paused" in refused(lambda: b.get(ids["paused"])).message
        resumed = b.resume(ids["paused"])
        assert resumed.run("bash", ["-c", "cat p.txt"]).stdout == "kept\n"
        # A's snapshot serves a new session here, and is this process's to delete.
        fork = b.create(snapshot=ids["snapshot"])
        assert fork.read("a.txt") == b"from-a\n"
        b.delete_snapshot(ids["snapshot"])
        refused(lambda: b.create(snapshot=ids["snapshot"]))
        # Closed here: closed for every process.
        session.close()
        again = sandbox_for(SHARED, "acme")
        try:
            refused(lambda: again.get(ids["session"]))
        finally:
            again.close()
    finally:
        proc.kill()
        b.close()


def test_the_default_private_launcher_keeps_sessions_to_its_process(folder: str) -> None:
    proc, ids = opener(PRIVATE, "one")
    b = sandbox_for(PRIVATE, "acme")
    try:
        refused(lambda: b.get(ids["session"]))
        finish(proc)
    finally:
        proc.kill()
        b.close()
    assert not os.path.exists(os.path.join(folder, "mainsdk"))  # nothing shared was made


def test_a_folder_that_is_not_this_users_own_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o700)
    loose.chmod(0o755)
    for path, why in ((link, "not a folder"), (loose, "open to other users")):
        with pytest.raises(LauncherError, match=why):
            Launcher(shared=True, shared_folder=str(path)).start()
    if os.getuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)  # made ahead by another user: a trap
        with pytest.raises(LauncherError, match="belongs to uid 65534"):
            Launcher(shared=True, shared_folder=str(theirs)).start()


# Another user's process, connecting to the server's socket itself: it must get no hello, only the close.
INTRUDER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
sock.settimeout(10)
print(repr(sock.recv(4096)))
"""


def test_another_user_is_refused_by_the_server_whatever_the_modes(folder: str) -> None:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("switching to another uid needs root and setpriv")
    launcher = Launcher(shared=True, pool=0)
    try:
        launcher.start()
        place = os.path.join(folder, "mainsdk")
        (sock,) = [name for name in os.listdir(place) if name.endswith(".sock")]
        # The modes opened as an attack or a mistake would: the server's own check still holds.
        os.chmod(folder, 0o755)
        os.chmod(place, 0o755)
        os.chmod(os.path.join(place, sock), 0o777)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-I", "-c"]
        intruder = [*nobody, INTRUDER, os.path.join(place, sock)]
        done = subprocess.run(intruder, capture_output=True, text=True, timeout=30, check=False)
        assert (done.returncode, done.stdout.strip()) == (0, "b''")
        # Its owner still gets the hello (and refuses the loosened folder as a client).
        with pytest.raises(LauncherError, match="open to other users"):
            Launcher(shared=True, pool=0).start()
        os.chmod(place, 0o700)
        mine = socket.socket(socket.AF_UNIX)
        mine.connect(os.path.join(place, sock))
        mine.settimeout(10)
        assert b'"op":"hello"' in mine.recv(4096).replace(b" ", b"")
        mine.close()
    finally:
        launcher.close()


def test_two_processes_starting_at_once_start_one_server(folder: str) -> None:
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", "from mainsdk_local.launcher_client import Launcher\n"
             "l = Launcher(shared=True, pool=0); print(l.hello['pid'])"],
            stdout=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]  # fmt: skip
    pids = {proc.communicate(timeout=60)[0].strip() for proc in starters}
    assert len(pids) == 1 and pids != {""}
    name = shared_launcher.server_name([os.path.realpath(sys.executable), False, 0, None])
    assert sorted(os.listdir(os.path.join(folder, "mainsdk"))) == [f"{name}.{end}" for end in ("lock", "log", "sock")]


def test_a_server_of_other_launcher_code_is_never_reached(tmp_path: Path) -> None:
    package = os.path.dirname(os.path.abspath(server_side.__file__))
    copy = shutil.copytree(package, tmp_path / "launcher", ignore=shutil.ignore_patterns("__pycache__"))
    assert shared_launcher.code_digest(str(copy)) == shared_launcher.code_digest(package)
    (copy / "protocol.py").write_text((copy / "protocol.py").read_text() + "\n# another release\n")
    assert shared_launcher.code_digest(str(copy)) != shared_launcher.code_digest(package)
    assert shared_launcher.launcher_code_digest() == shared_launcher.code_digest(package)  # what names the server


def test_sandbox_local_launcher_is_private_by_default_and_checked_with_its_line() -> None:
    assert load_config_text("sandbox:\n  driver: local\n").sandbox.section("local", LocalPrograms).launcher == "private"
    assert load_config_text(SHARED).sandbox.section("local", LocalPrograms).launcher == "shared"
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  driver: local\n  local: { launcher: public }\n")
    [problem] = caught.value.problems
    assert (problem.code, problem.line) == (INVALID_OPTION, 3)
    assert "sandbox.local.launcher: 'public' must be private" in f"{problem.key}: {problem.message}"
    with pytest.raises(SandboxError, match="launcher: must be one of private, shared") as refused:
        local_sandbox_driver(launcher="public")
    assert refused.value.code == INVALID_OPTION


# Process A at the launcher's level: keeps a box for half a second of idle time, writes to it, exits.
KEEPER = """
import asyncio
from mainsdk_local.launcher_client import Launcher
async def main():
    box = await Launcher(shared=True, pool=0).open_box(disk_bytes=1 << 20, keep=("ses_" + "2" * 24, "acme", 0.5))
    await box.write_file("a.txt", b"a")
asyncio.run(main())
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


async def test_a_kept_box_ends_at_its_idle_time_and_the_server_once_it_holds_nothing(folder: str) -> None:
    launcher = Launcher(shared=True, pool=0, shared_idle=0.5)
    try:
        pid = (await asyncio.to_thread(lambda: launcher.hello))["pid"]
        keeper = await asyncio.create_subprocess_exec(sys.executable, "-c", KEEPER)
        assert await keeper.wait() == 0
        await asyncio.sleep(1.0)  # past its idle time, no process holding it: closed
        assert await launcher.attach_box("ses_" + "2" * 24, "acme") is None
        assert not _gone(pid)  # held by this process's connection
    finally:
        launcher.close()
    for _ in range(200):  # nothing held: the server exits after its half second (bounded wait, not a timing)
        if _gone(pid):
            break
        await asyncio.sleep(0.05)
    assert _gone(pid)
    assert not [name for name in os.listdir(os.path.join(folder, "mainsdk")) if name.endswith(".sock")]
