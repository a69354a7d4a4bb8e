"""Weak mode (no namespaces): the same proxy, and Landlock where the kernel has it. The result says weak.

Weak mode runs the code on the host. These tests force it (``force_weak``) and
check what still holds there; the namespace path is covered by the test_guarantee_*.py modules.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import NOT_GIVEN, LoopbackServer
from mainsdk.errors import HOST_NOT_ALLOWED
from mainsdk_local.launcher import landlock

pytestmark = [
    pytest.mark.skipif(landlock.abi() < 4, reason="needs Landlock with TCP rules (ABI 4, Linux 6.7)"),
    pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl"),
]


@pytest.fixture
def weak(make_net_sandbox: Callable[..., Any]) -> Any:
    """A weak-mode sandbox that can give runs the test hosts."""
    return make_net_sandbox(force_weak=True)


@pytest.fixture
def app_file() -> Iterator[Path]:
    """A world-readable file of the app's, outside any box."""
    path = Path("/tmp") / f"mainsdk-weak-{os.getpid()}.txt"
    path.write_text("app-only")
    path.chmod(0o644)
    yield path
    path.unlink()


def test_landlock_keeps_weak_code_to_its_box_and_its_proxy(
    weak: Any, http_server: LoopbackServer, app_file: Path
) -> None:
    # Must hold in weak mode: the code reads the system but not the app's files, writes only its box,
    # cannot bind or connect TCP except to its own proxy, and its result says weak.
    with socket.create_server(("127.0.0.1", 0)) as service:
        script = (
            f"cat {app_file} 2>/dev/null || echo read-denied\n"
            "echo x > /tmp/weak-escape 2>/dev/null || echo write-denied\n"
            "echo mine > ../out/o.txt && echo out-ok\n"
            f"(exec 3<>/dev/tcp/127.0.0.1/{service.getsockname()[1]}) 2>/dev/null || echo connect-denied\n"
            f"curl -sS http://api.example.test:{http_server.port}/weak\n"
        )
        result = weak.sandbox.run(script, "bash", network=["api.example.test"])
    assert result.isolation == "weak"
    assert result.stdout.splitlines() == [
        "read-denied",
        "write-denied",
        "out-ok",
        "connect-denied",
        f"http api.example.test:{http_server.port} /weak",
    ], result.stderr
    assert not Path("/tmp/weak-escape").exists()
    assert [f.name for f in result.files] == ["o.txt"]


def test_weak_code_has_tmpdir_and_home_in_its_own_box_folder(make_net_sandbox: Callable[..., Any]) -> None:
    # Must hold in weak mode: the host's /tmp stays unwritable (above), and TMPDIR and HOME name folders of the
    # box's own private directory, writable, the code's own, and gone with the box.
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs /usr/bin/python3")  # a box's uid cannot enter an interpreter under root's home
    weak = make_net_sandbox(force_weak=True, programs={"python": "/usr/bin/python3"})
    code = (
        "import json, os, tempfile\nhome, tmp = os.environ['HOME'], os.environ['TMPDIR']\n"
        "open(os.path.join(tmp, 'x'), 'w').write('1'); os.makedirs(os.path.join(home, '.cache', 'app'))\n"
        "print(json.dumps([home, tmp, tempfile.gettempdir(), os.getcwd(), os.stat(home).st_uid == os.getuid()]))"
    )
    result = weak.sandbox.run(code)
    assert result.isolation == "weak" and result.exit_code == 0, result.stderr
    home, tmp, gettempdir, cwd, mine = json.loads(result.stdout)
    box = os.path.dirname(cwd)  # the code starts in the box's work/
    assert tmp == gettempdir == os.path.join(box, "tmp") and home == os.path.join(tmp, "home") and mine, result
    deadline = time.monotonic() + 10
    while os.path.exists(box):  # gone with the box, on a turn of the launcher's loop after the reply
        assert time.monotonic() < deadline, f"{box} outlived its box: {sorted(os.listdir(box))}"
        time.sleep(0.02)


def test_weak_code_without_hosts_has_no_tcp_at_all(weak: Any, http_server: LoopbackServer) -> None:
    result = weak.sandbox.run(f"curl -sS -m 3 http://127.0.0.1:{http_server.port}/; echo exit=$?", "bash")
    assert result.stdout.strip().endswith("exit=7") and http_server.seen == []  # curl: could not connect


def test_the_weak_proxy_needs_the_runs_own_password(weak: Any, http_server: LoopbackServer) -> None:
    # Must hold: in weak mode the proxy listens on the host's loopback, where any local process could reach
    # it; without the run's password it serves nothing, so other runs never get this run's hosts.
    port = http_server.port
    bare = '--proxy "http://${HTTP_PROXY##*@}"'  # the proxy's address without the password
    script = (
        f'curl -sS -o /dev/null -w "%{{http_code}}\\n" {bare} http://api.example.test:{port}/\n'
        f"curl -sS http://{NOT_GIVEN}:{port}/\n"
    )
    result = weak.sandbox.run(script, "bash", network=["api.example.test"])
    assert result.stdout.splitlines() == [
        "407",
        f"{HOST_NOT_ALLOWED}: {NOT_GIVEN} is not a host this sandbox run was given",
    ], result.stderr
    assert http_server.seen == [] and result.hosts_refused == (NOT_GIVEN,)


def test_python_and_node_run_under_weak_mode_rules(make_net_sandbox: Callable[..., Any]) -> None:
    # The interpreters still work under the seccomp filter and Landlock (a system python: a box's uid cannot
    # enter an interpreter installed under root's home).
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs /usr/bin/python3")
    built = make_net_sandbox(force_weak=True, programs={"python": "/usr/bin/python3"})
    code = "import json, sys, ssl, sqlite3, asyncio; asyncio.run(asyncio.sleep(0)); print(sys.version_info[0])"
    result = built.sandbox.run(code)
    assert (result.stdout, result.exit_code, result.isolation) == ("3\n", 0, "weak"), result.stderr
    assert built.sandbox.run("console.log(6 * 7)", "node").stdout == "42\n"


def test_weak_code_gets_the_same_socket_family_allowlist(make_net_sandbox: Callable[..., Any]) -> None:
    # Must hold in weak mode too: the seccomp filter refuses every address family but AF_INET, AF_INET6 and
    # NETLINK_ROUTE (vsock, packet, Unix, netlink uevents, ...), while TCP and socketpair still work.
    from escape_probes import SOCKET_PROBE, check_socket_families

    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs /usr/bin/python3")  # a box's uid cannot enter an interpreter under root's home
    built = make_net_sandbox(force_weak=True, programs={"python": "/usr/bin/python3"})
    result = built.sandbox.run(SOCKET_PROBE)
    check_socket_families(result, tcp="EACCES")  # Landlock refuses TCP bind in weak mode
    assert result.isolation == "weak"
