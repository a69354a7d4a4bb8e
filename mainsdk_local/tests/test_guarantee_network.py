"""Code reaches exactly the hosts a run was given, through the proxy, and nothing else.

No network by default; the allowlist by name, wildcard and IP; the host's loopback services, the proxy's
own control surface and another run's proxy out of reach; curl, node, httpx and pip through the proxy.
Every server here is one the test starts on the host's loopback; the driver's ``resolve`` mapping
(conftest.RESOLVE) lets a run be given it by name. Nothing here sends a packet anywhere else.
"""

from __future__ import annotations

import ast
import asyncio
import errno
import hashlib
import importlib.util
import io
import json
import logging
import os
import shutil
import socket
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import NETWORK_CONFIG, NETWORK_HOSTS, NOT_GIVEN, RESOLVE, LoopbackServer
from mainsdk import AsyncSandbox, Sandbox, SandboxError, secret
from mainsdk.config import load_config_text
from mainsdk.errors import HOST_NOT_ALLOWED, INVALID_OPTION, ConfigError
from requires import NAMESPACES, NET_NAMESPACE

from mainsdk_local import local_sandbox_driver


class Listener:
    """A TCP service of the app's on 127.0.0.1 (random port) that counts who reached it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.reached = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.reached += 1
            conn.close()


@pytest.fixture
def host_service() -> Iterator[Listener]:
    service = Listener()
    yield service
    service.sock.close()


# Raw requests to the proxy at 127.0.0.1:3128 inside the box; prints the status line of each answer.
RAW_REQUESTS = r"""
import json, socket, sys
for request in json.loads(sys.argv[1]):
    try:
        with socket.create_connection(('127.0.0.1', 3128), timeout=10) as s:
            s.sendall(request.encode('latin-1'))
            print(repr(s.recv(200).split(b'\r\n')[0].decode()))
    except OSError as exc:
        print(type(exc).__name__)
"""


def raw_requests(sandbox: Sandbox, requests: list[str], hosts: list[str]) -> list[str]:
    code = f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(requests))}]\n{RAW_REQUESTS}"
    result = sandbox.run(code, network=hosts)
    assert result.exit_code == 0, result.stderr
    return [ast.literal_eval(line) if line.startswith("'") else line for line in result.stdout.splitlines()]


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_the_hosts_loopback_services_are_out_of_reach(net_sandbox_given_localhost: Any, host_service: Listener) -> None:
    # Must hold: a service listening on the host's 127.0.0.1 is reached neither directly (the box has its
    # own loopback) nor through the proxy: not by IP (v4, v6, odd spellings), not by a name that resolves
    # to loopback, not by a Host header. Only the driver's explicit resolve mapping could point a name there.
    port = host_service.port
    direct = (
        "import socket\n"
        f"for host in ['127.0.0.1', '::1', 'localhost', '127.0.0.2']:\n"
        "    try:\n"
        f"        socket.create_connection((host, {port}), timeout=3).close(); print(host, 'connected')\n"
        "    except OSError as exc:\n        print(host, type(exc).__name__)\n"
    )
    for hosts in ([], ["api.example.test"]):
        out = net_sandbox_given_localhost.sandbox.run(direct, network=hosts).stdout.splitlines()
        assert not any(line.endswith("connected") for line in out), out
    given = ["api.example.test", "localhost"]
    answers = raw_requests(
        net_sandbox_given_localhost.sandbox,
        [
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n",
            f"CONNECT [::1]:{port} HTTP/1.1\r\n\r\n",
            f"CONNECT [::ffff:127.0.0.1]:{port} HTTP/1.1\r\n\r\n",
            f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n",
            f"CONNECT 2130706433:{port} HTTP/1.1\r\n\r\n",
            f"CONNECT 127.1:{port} HTTP/1.1\r\n\r\n",
            f"CONNECT 0x7f.0.0.1:{port} HTTP/1.1\r\n\r\n",
            f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n",
            f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost:{port}\r\n\r\n",
        ],
        given,
    )
    assert all(a.startswith(("HTTP/1.1 403", "HTTP/1.1 400")) for a in answers), answers
    assert host_service.reached == 0


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_the_proxy_has_no_control_surface(net_sandbox: Any) -> None:
    # Must hold: talking to the proxy itself gets nothing but refusals: it has no admin page or API, it is
    # not reachable as a host, malformed requests get a 4xx and a closed connection; and the code holds no
    # descriptor to the launcher and cannot open a Unix socket to anything.
    answers = raw_requests(
        net_sandbox.sandbox,
        [
            "GET http://127.0.0.1:3128/ HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\r\n",
            "CONNECT 127.0.0.1:3128 HTTP/1.1\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n\r\n",
            "GET /admin HTTP/1.1\r\n\r\n",
            "CONNECT api.example.test HTTP/1.1\r\n\r\n",
            "CONNECT api.example.test:99999 HTTP/1.1\r\n\r\n",
            "GET ftp://api.example.test/ HTTP/1.1\r\n\r\n",
            "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + "A" * 60 + "\r\n\r\n",
            "GET http://api.example.test/ HTTP/1.1\r\n" + "X: " + "y" * 70000 + "\r\n\r\n",
        ],
        ["api.example.test"],
    )
    statuses = [a.split(" ")[1] if a.startswith("HTTP/1.1 ") else a for a in answers]
    assert statuses == ["403", "403", "400", "400", "400", "400", "400", "400", "431"], answers
    code = (
        "import os, socket\n"
        "print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))\n"
        "print(open('/proc/net/unix').read().count('\\n'))\n"
        "for address in ['\\0mainsdk', '/run/systemd/private', '/var/run/docker.sock']:\n"
        "    try:\n        socket.socket(socket.AF_UNIX).connect(address); print('connected')\n"
        "    except OSError as exc:\n        print(exc.errno)\n"
    )
    out = net_sandbox.sandbox.run(code, network=["api.example.test"]).stdout.splitlines()
    assert out[0] == "[0, 1, 2, 3]"  # stdio, and the descriptor listing /proc/self/fd
    assert out[1] == "1"  # the header: no Unix socket in the box's network namespace
    assert out[2:] == [str(errno.EAFNOSUPPORT)] * 3  # socket(AF_UNIX) is refused by the seccomp filter


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_a_run_cannot_reach_the_proxy_of_another_run(make_net_sandbox: Callable[..., Any]) -> None:
    # Must hold: each run's proxy lives in that run's own network namespace; a run without hosts finds
    # nothing at the proxy's address even while another run with hosts is running.
    sandbox = make_net_sandbox().sandbox
    holder = threading.Thread(
        target=lambda: sandbox.run("import time; time.sleep(1.5)", network=["api.example.test"]), daemon=True
    )
    holder.start()
    time.sleep(0.5)
    code = (
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 3128), timeout=3); print('connected')\n"
        "except OSError as exc:\n    print(type(exc).__name__)\n"
    )
    assert sandbox.run(code).stdout == "ConnectionRefusedError\n"
    assert sandbox.run(code, network=[]).stdout == "ConnectionRefusedError\n"
    holder.join()


def test_the_code_cannot_reach_the_network(sandbox: Sandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = (
            "import socket\n"
            "print([name for _, name in socket.if_nameindex()])\n"
            "print(open('/proc/net/route').read().count('\\n'))\n"
            "s = socket.socket(); s.settimeout(2)\n"
            f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
            "except OSError as e:\n    print(type(e).__name__)\n"
        )
        out = sandbox.run(code).stdout.splitlines()
    assert out == ["['lo']", "1", "ConnectionRefusedError"]  # only loopback, an empty route table, the host unreachable


# Python run in the sandbox: GET each URL (argv[1] is a JSON list) with urllib, trusting ca.pem when it is there.
FETCH = r"""
import json, os, ssl, sys, urllib.error, urllib.request
context = ssl.create_default_context(cafile="ca.pem") if os.path.exists("ca.pem") else None
for url in json.loads(sys.argv[1]):
    try:
        with urllib.request.urlopen(url, context=context, timeout=10) as answer:
            print(answer.status, answer.read().decode().strip())
    except urllib.error.HTTPError as exc:
        print(exc.code, exc.read().decode().strip())
    except OSError as exc:
        print("error", getattr(exc, "reason", exc))
"""


def fetch(built: Any, urls: list[str], hosts: list[str], **options: Any) -> Any:
    """Run FETCH over ``urls`` in a run given ``hosts``; return the result."""
    code = f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(urls))}]\n{FETCH}"
    return built.sandbox.run(code, network=hosts, **options)


def make_net_sandbox_with_secret(make_sandbox: Any) -> Any:
    """The network sandbox, with TEST_API_KEY's value coming from the test."""
    config = load_config_text(NETWORK_CONFIG)
    driver = local_sandbox_driver(permissions=config.permissions, resolve=RESOLVE)
    values = {"TEST_API_KEY": "tok-weather-5e3c"}
    return make_sandbox(NETWORK_CONFIG, driver=driver, secret=values.get)


NODE_CODE = """
const https = require('https');
const get = (url) => new Promise((resolve) => https.get(url, (res) => {
  let body = ''; res.on('data', (d) => body += d); res.on('end', () => resolve(res.statusCode + ' ' + body.trim()));
}).on('error', (e) => resolve('error ' + e.message)));
(async () => {
  for (const url of JSON.parse(process.argv[1])) {
    try { const r = await fetch(url); console.log('fetch', r.status, (await r.text()).trim()); }
    catch (e) { console.log('fetch error', e.cause ? e.cause.message : e.message); }
    console.log('https.get', await get(url));
  }
})();
"""


def _package_files(names: list[str]) -> dict[str, bytes]:
    """The source of installed pure-Python packages, as files for a run's work folder under pkgs/."""
    files: dict[str, bytes] = {}
    for name in names:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        origin = Path(spec.origin)
        if origin.name != "__init__.py":  # a single-module package
            files[f"pkgs/{origin.name}"] = origin.read_bytes()
            continue
        for path in origin.parent.rglob("*"):
            if path.is_file() and path.suffix in (".py", ".pem", ".typed", ".txt") and "__pycache__" not in path.parts:
                files[f"pkgs/{name}/{path.relative_to(origin.parent)}"] = path.read_bytes()
    return files


def _wheel(name: str, version: str) -> bytes:
    """A minimal valid wheel holding an empty package."""
    buffer = io.BytesIO()
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return buffer.getvalue()


class HoldServer:
    """A TCP server on loopback that accepts and holds connections, noting when each one is closed."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.opened = 0
        self.closed = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.opened += 1
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with conn:
            while conn.recv(4096):
                pass
        self.closed += 1


@pytest.fixture
def hold_server() -> Iterator[HoldServer]:
    server = HoldServer()
    yield server
    server.listener.close()


def _open_fds() -> dict[int, str]:
    """This process's descriptors and what they are (the one listing the directory has gone by then)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return found


@NET_NAMESPACE
def test_tutorial_step_4_one_host_and_one_secret(make_sandbox: Any, http_server: LoopbackServer) -> None:
    # The tutorial's call, with a loopback server standing in for the host and a secret in the environment.
    built = make_net_sandbox_with_secret(make_sandbox)
    code = (
        "import os, urllib.request\n"
        f"request = urllib.request.Request('http://api.example.test:{http_server.port}/weather?city=Oslo',"
        " headers={'X-Key': os.environ['WEATHER_KEY']})\n"
        "print(urllib.request.urlopen(request).read().decode().strip())"
    )
    result = built.sandbox.run(
        code,
        language="python",
        feature="weather",
        network=["api.example.test"],
        env={"WEATHER_KEY": secret("TEST_API_KEY")},
    )
    assert result.stdout == f"http api.example.test:{http_server.port} /weather?city=Oslo\n", result.stderr
    assert (result.isolation, result.exit_code, result.hosts_refused) == ("namespace", 0, ())
    assert http_server.seen[0].headers["X-Key"] == "tok-weather-5e3c"  # the secret reached the host, and only it
    [event] = built.events
    assert (event.hosts, event.env_names, event.hosts_refused) == (("api.example.test",), ("WEATHER_KEY",), ())


@NET_NAMESPACE
def test_https_through_connect_with_a_certificate_passed_in(
    net_sandbox: Any, https_server: LoopbackServer, test_ca: str
) -> None:
    url = f"https://api.example.test:{https_server.port}/secure"
    result = fetch(net_sandbox, [url], ["api.example.test"], files={"ca.pem": test_ca})
    assert result.stdout == f"200 https api.example.test:{https_server.port} /secure\n", result.stderr


@NET_NAMESPACE
def test_a_host_not_given_gets_a_403_naming_it_is_logged_and_audited(
    net_sandbox: Any,
    http_server: LoopbackServer,
    https_server: LoopbackServer,
    test_ca: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    urls = [
        f"http://{NOT_GIVEN}:{http_server.port}/x",
        f"https://{NOT_GIVEN}:{https_server.port}/x",
        f"http://other.example.test:{http_server.port}/x",
        f"http://api.example.test:{http_server.port}/ok",
    ]
    with caplog.at_level(logging.WARNING, logger="mainsdk"):
        started = time.monotonic()
        result = fetch(net_sandbox, urls, ["api.example.test"], files={"ca.pem": test_ca})
    assert time.monotonic() - started < 5  # answered, not hung
    lines = result.stdout.splitlines()
    assert lines[0] == f"403 {HOST_NOT_ALLOWED}: {NOT_GIVEN} is not a host this sandbox run was given"
    # Through CONNECT the code sees the status line: urllib puts its reason in the error.
    assert lines[1].startswith("error Tunnel connection failed: 403") and f"{HOST_NOT_ALLOWED}: {NOT_GIVEN}" in lines[1]
    assert lines[2] == f"403 {HOST_NOT_ALLOWED}: other.example.test is not a host this sandbox run was given"
    assert lines[3] == f"200 http api.example.test:{http_server.port} /ok"
    assert result.hosts_refused == (NOT_GIVEN, "other.example.test")
    assert net_sandbox.events[-1].hosts_refused == (NOT_GIVEN, "other.example.test")
    warnings = [r.getMessage() for r in caplog.records if r.name == "mainsdk" and r.levelno == logging.WARNING]
    assert len(warnings) == 2  # once per host, however often the code tries it
    assert HOST_NOT_ALLOWED in warnings[0] and NOT_GIVEN in warnings[0] and result.id in warnings[0]
    assert all(s.path in ("/ok",) for s in http_server.seen + https_server.seen)  # nothing else reached a server


@NET_NAMESPACE
def test_a_host_outside_sandbox_network_is_refused_before_anything_runs(net_sandbox: Any, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SandboxError) as caught:
        net_sandbox.sandbox.run(f"open({str(marker)!r}, 'w')", network=[NOT_GIVEN])
    assert caught.value.code == HOST_NOT_ALLOWED and not marker.exists()


@NET_NAMESPACE
def test_a_wildcard_covers_subdomains_only(net_sandbox: Any, http_server: LoopbackServer) -> None:
    port = http_server.port
    urls = [f"http://a.wild.example.test:{port}/", f"http://wild.example.test:{port}/"]
    result = fetch(net_sandbox, urls, ["*.wild.example.test"])
    assert result.stdout.splitlines() == [
        f"200 http a.wild.example.test:{port} /",
        f"403 {HOST_NOT_ALLOWED}: wild.example.test is not a host this sandbox run was given",
    ]


@NET_NAMESPACE
def test_an_ip_literal_passes_only_when_that_ip_was_given(net_sandbox: Any, http_server: LoopbackServer) -> None:
    url = f"http://127.0.0.1:{http_server.port}/ip"
    refused = fetch(net_sandbox, [url], ["api.example.test"])
    assert refused.stdout == f"403 {HOST_NOT_ALLOWED}: 127.0.0.1 is not a host this sandbox run was given\n"
    given = fetch(net_sandbox, [url], ["127.0.0.1"])
    assert given.stdout == f"200 http 127.0.0.1:{http_server.port} /ip\n"


@NET_NAMESPACE
def test_a_name_that_resolves_to_loopback_is_refused(
    net_sandbox_given_localhost: Any, http_server: LoopbackServer
) -> None:
    # "localhost" is given by name, and resolves (through the app's own resolver) to a loopback address:
    # DNS rebinding onto the app's services. Only the driver's explicit resolve mapping may do that. (main.yaml
    # cannot list it in sandbox.network; the config is built by hand, so this is the proxy's own defence.)
    result = fetch(net_sandbox_given_localhost, [f"http://localhost:{http_server.port}/"], ["localhost"])
    assert result.stdout.startswith(f"403 {HOST_NOT_ALLOWED}: localhost was given to this sandbox run, but it resolves")
    assert "not a public address" in result.stdout
    assert http_server.seen == []


@NET_NAMESPACE
def test_localhost_in_sandbox_network_is_refused_at_load_and_127_0_0_1_is_what_reaches_the_host(
    net_sandbox: Any, http_server: LoopbackServer
) -> None:
    # Listed in both lists, "localhost" loaded and then failed every run with a 403, while 127.0.0.1 worked.
    text = NETWORK_CONFIG.replace('"127.0.0.1"]', '"127.0.0.1", "localhost"]')
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="main.yaml")
    [problem] = caught.value.problems
    assert (problem.code, problem.key) == (INVALID_OPTION, f"sandbox.network[{len(NETWORK_HOSTS)}]")
    assert "list 127.0.0.1 or ::1 here and in network.allow instead" in problem.message
    reached = fetch(net_sandbox, [f"http://127.0.0.1:{http_server.port}/"], ["127.0.0.1"])
    assert reached.stdout == f"200 http 127.0.0.1:{http_server.port} /\n"


@NET_NAMESPACE
def test_a_host_header_naming_another_host_is_refused(net_sandbox: Any, http_server: LoopbackServer) -> None:
    code = (
        "import urllib.request, urllib.error\n"
        f"request = urllib.request.Request('http://api.example.test:{http_server.port}/',"
        f" headers={{'Host': '{NOT_GIVEN}'}})\n"
        "try:\n    urllib.request.urlopen(request)\n"
        "except urllib.error.HTTPError as exc:\n    print(exc.code, exc.read().decode().strip())\n"
    )
    result = net_sandbox.sandbox.run(code, network=["api.example.test"])
    assert result.stdout.startswith(f"403 {HOST_NOT_ALLOWED}: {NOT_GIVEN} is not a host")
    assert result.hosts_refused == (NOT_GIVEN,) and http_server.seen == []


@NET_NAMESPACE
def test_code_that_ignores_the_proxy_reaches_nothing(net_sandbox: Any, http_server: LoopbackServer) -> None:
    code = (
        "import json, os, socket\n"
        "out = {}\n"
        "try:\n    socket.getaddrinfo('api.example.test', 80); out['dns'] = 'resolved'\n"
        "except OSError as exc:\n    out['dns'] = type(exc).__name__\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {http_server.port}), timeout=3).close()\n"
        "    out['direct'] = 'connected'\n"
        "except OSError as exc:\n    out['direct'] = type(exc).__name__\n"
        "out['routes'] = open('/proc/net/route').read().count('\\n')\n"
        "out['resolv'] = os.path.exists('/etc/resolv.conf')\n"
        "out['proxy'] = os.environ['HTTPS_PROXY']\n"
        "print(json.dumps(out))"
    )
    out = json.loads(net_sandbox.sandbox.run(code, network=["api.example.test"]).stdout)
    assert out == {
        "dns": "gaierror",  # no DNS server at all: names cannot carry data out either
        "direct": "ConnectionRefusedError",  # the namespace's own loopback, not the host's
        "routes": 1,  # the header line only: no route out
        "resolv": False,
        "proxy": "http://127.0.0.1:3128",
    }
    assert http_server.seen == []


@NET_NAMESPACE
def test_the_proxy_variables_are_set_and_no_proxy_is_empty(net_sandbox: Any) -> None:
    code = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if 'PROXY' in k.upper()}))"
    env = json.loads(net_sandbox.sandbox.run(code, network=["api.example.test"]).stdout)
    url = "http://127.0.0.1:3128"
    names = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")
    assert env == {**dict.fromkeys(names, url), "NO_PROXY": "", "no_proxy": "", "NODE_USE_ENV_PROXY": "1"}
    # A run without hosts gets none of them, and nothing listens where the proxy would.
    code = (
        "import os, socket\nprint(sorted(k for k in os.environ if 'PROXY' in k.upper()))\n"
        "try:\n    socket.create_connection(('127.0.0.1', 3128), timeout=3); print('connected')\n"
        "except OSError as exc:\n    print(type(exc).__name__)\n"
    )
    assert net_sandbox.sandbox.run(code).stdout == "[]\nConnectionRefusedError\n"


@NET_NAMESPACE
@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl_uses_the_proxy_for_http_and_https(
    net_sandbox: Any, http_server: LoopbackServer, https_server: LoopbackServer, test_ca: str
) -> None:
    script = (
        f"curl -sS http://api.example.test:{http_server.port}/c1\n"
        f"curl -sS --cacert ca.pem https://api.example.test:{https_server.port}/c2\n"
        f"curl -sS --cacert ca.pem https://{NOT_GIVEN}:{https_server.port}/c3; echo exit=$?\n"
    )
    result = net_sandbox.sandbox.run(script, "bash", network=["api.example.test"], files={"ca.pem": test_ca})
    assert result.stdout.splitlines() == [
        f"http api.example.test:{http_server.port} /c1",
        f"https api.example.test:{https_server.port} /c2",
        "exit=56",
    ], result.stderr
    assert "CONNECT tunnel failed, response 403" in result.stderr
    assert result.hosts_refused == (NOT_GIVEN,)


@NET_NAMESPACE
@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_node_fetch_and_https_use_the_proxy(net_sandbox: Any, https_server: LoopbackServer, test_ca: str) -> None:
    # Node before 24 ignores the proxy variables; the driver's preload routes fetch and the default agents.
    good = f"https://api.example.test:{https_server.port}/n"
    bad = f"https://{NOT_GIVEN}:{https_server.port}/n"
    code = f"process.argv[1] = {json.dumps(json.dumps([good, bad]))};\n{NODE_CODE}"
    result = net_sandbox.sandbox.run(
        code, "node", network=["api.example.test"], files={"ca.pem": test_ca}, env={"NODE_EXTRA_CA_CERTS": "ca.pem"}
    )
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        f"fetch 200 https api.example.test:{https_server.port} /n",
        f"https.get 200 https api.example.test:{https_server.port} /n",
    ], result.stderr
    assert lines[2].startswith("fetch error the proxy refused CONNECT") and HOST_NOT_ALLOWED in lines[2]
    assert lines[3].startswith("https.get error the proxy refused CONNECT") and NOT_GIVEN in lines[3]


@NET_NAMESPACE
def test_httpx_honours_the_variables(net_sandbox: Any, https_server: LoopbackServer, test_ca: str) -> None:
    # httpx is a test dependency (tox installs it): the code imports the app's copy, passed in as files.
    files = _package_files(["httpx", "httpcore", "h11", "anyio", "idna", "certifi", "typing_extensions"])
    code = (
        "import sys; sys.path.insert(0, 'pkgs')\nimport ssl, httpx\n"
        "context = ssl.create_default_context(cafile='ca.pem')\n"
        f"print(httpx.get('https://api.example.test:{https_server.port}/x', verify=context).text.strip())\n"
        "try:\n"
        f"    httpx.get('https://{NOT_GIVEN}:{https_server.port}/x', verify=context)\n"
        "except httpx.ProxyError as exc:\n    print('ProxyError', exc)\n"
    )
    result = net_sandbox.sandbox.run(code, network=["api.example.test"], files={**files, "ca.pem": test_ca})
    lines = result.stdout.splitlines()
    assert lines[0] == f"https api.example.test:{https_server.port} /x", result.stderr[-2000:]
    assert lines[1].startswith("ProxyError 403")


@NET_NAMESPACE
def test_pip_downloads_through_the_proxy(net_sandbox: Any, https_server: LoopbackServer, test_ca: str) -> None:
    # pip (and the requests it vendors) reads HTTPS_PROXY: a package index on a given host is reachable.
    pytest.importorskip("pip")
    wheel = _wheel("demo", "1.0")
    digest = hashlib.sha256(wheel).hexdigest()
    https_server.routes["/simple/demo/"] = (
        "text/html",
        f'<html><body><a href="/files/demo-1.0-py3-none-any.whl#sha256={digest}">demo-1.0-py3-none-any.whl</a>'
        "</body></html>".encode(),
    )
    https_server.routes["/files/demo-1.0-py3-none-any.whl"] = ("application/octet-stream", wheel)
    index = f"https://api.example.test:{https_server.port}/simple/"
    code = (
        "import sys; sys.path.insert(0, 'pkgs'); sys.argv = ['pip', 'download', '--no-deps', '--no-cache-dir',"
        f" '--disable-pip-version-check', '--cert', 'ca.pem', '--index-url', '{index}', '-d', '../out', 'demo']\n"
        "from pip._internal.cli.main import main\nsys.exit(main())\n"
    )
    result = net_sandbox.sandbox.run(
        code, network=["api.example.test"], files={**_package_files(["pip"]), "ca.pem": test_ca}
    )
    assert result.exit_code == 0, result.stdout[-1500:] + result.stderr[-1500:]
    [downloaded] = result.files
    assert downloaded.name == "demo-1.0-py3-none-any.whl" and net_sandbox.sandbox.files.read(downloaded) == wheel


@NET_NAMESPACE
async def test_concurrent_runs_never_see_each_others_hosts(make_net_sandbox: Any, http_server: LoopbackServer) -> None:

    sandbox = make_net_sandbox().sandbox
    async_sandbox: AsyncSandbox = sandbox._async
    port = http_server.port

    def code(first: str, second: str) -> str:
        urls = [f"http://{first}:{port}/1", f"http://{second}:{port}/2"]
        return f"import sys, time; time.sleep(0.3); sys.argv[1:] = [{json.dumps(json.dumps(urls))}]\n{FETCH}"

    a, b = await asyncio.gather(
        async_sandbox.run(code("api.example.test", "other.example.test"), network=["api.example.test"]),
        async_sandbox.run(code("other.example.test", "api.example.test"), network=["other.example.test"]),
    )
    assert a.stdout.splitlines()[0] == f"200 http api.example.test:{port} /1"
    assert a.stdout.splitlines()[1].startswith(f"403 {HOST_NOT_ALLOWED}: other.example.test")
    assert b.stdout.splitlines()[0] == f"200 http other.example.test:{port} /1"
    assert b.stdout.splitlines()[1].startswith(f"403 {HOST_NOT_ALLOWED}: api.example.test")
    assert (a.hosts_refused, b.hosts_refused) == (("other.example.test",), ("api.example.test",))


@NET_NAMESPACE
def test_the_proxy_and_its_connections_end_with_the_run(net_sandbox: Any, hold_server: HoldServer) -> None:
    # The code opens a tunnel and leaves it open in a background process, then the run ends.
    code = (
        "import socket, subprocess, sys\n"
        "s = socket.create_connection(('127.0.0.1', 3128))\n"
        f"s.sendall(b'CONNECT api.example.test:{hold_server.port} HTTP/1.1\\r\\n\\r\\n')\n"
        "print(s.recv(100).decode().splitlines()[0], flush=True)\n"
        "subprocess.Popen(['/usr/bin/sleep', '1000'], pass_fds=[s.fileno()])\n"
    )
    net_sandbox.sandbox.run("print(1)", network=["api.example.test"])  # warm: the loop thread and its pools
    before = _open_fds()
    result = net_sandbox.sandbox.run(code, network=["api.example.test"])
    assert result.stdout == "HTTP/1.1 200 Connection established\n", result.stderr
    deadline = time.monotonic() + 5
    while hold_server.closed < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (hold_server.opened, hold_server.closed) == (1, 1)  # the upstream side was closed with the run
    leaked = {fd: what for fd, what in _open_fds().items() if before.get(fd) != what}
    assert leaked == {}  # no listener, connection or namespace kept by the app


@NET_NAMESPACE
def test_session_commands_get_the_sessions_hosts(net_sandbox: Any, http_server: LoopbackServer) -> None:
    with net_sandbox.sandbox.create(network=["api.example.test"]) as session:
        for path in ("/first", "/second"):
            url = f"http://api.example.test:{http_server.port}{path}"
            out = session.run(
                "python3",
                ["-c", "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())", url],
            )
            assert out.stdout == f"http api.example.test:{http_server.port} {path}\n\n", out.stderr
        request = f"printf 'CONNECT {NOT_GIVEN}:1 HTTP/1.1\\r\\n\\r\\n' >&3"
        refused = session.run("bash", ["-c", f"exec 3<>/dev/tcp/127.0.0.1/3128; {request}; head -c 12 <&3"])
        assert refused.stdout == "HTTP/1.1 403" and refused.hosts_refused == (NOT_GIVEN,)


@NET_NAMESPACE
def test_the_proxy_lets_through_exactly_the_policy_core_handed_over_and_audited(
    make_sandbox: Any, http_server: LoopbackServer
) -> None:
    # A driver whose policy hook narrows the hosts: the box must enforce the policy it was handed (and that
    # the audit shows), not recompute one from the hosts. Before, the proxy read spec.hosts and let both through.
    from mainsdk.hookspecs import hookimpl
    from mainsdk_local.driver import LocalDriver

    class Narrowing(LocalDriver):
        @hookimpl
        def mainsdk_network_policy(self, hosts: Any) -> Any:
            return {"hosts": ["api.example.test"]}

    config = load_config_text(NETWORK_CONFIG)
    driver = Narrowing(permissions=config.permissions, resolve=RESOLVE)
    built = make_sandbox(NETWORK_CONFIG, driver=driver)
    urls = [f"http://api.example.test:{http_server.port}/a", f"http://other.example.test:{http_server.port}/b"]
    result = fetch(built, urls, ["api.example.test", "other.example.test"])
    lines = result.stdout.splitlines()
    assert lines[0] == f"200 http api.example.test:{http_server.port} /a", result.stderr
    assert lines[1].startswith("403"), lines
    assert [seen.path for seen in http_server.seen] == ["/a"]
    [event] = built.events
    assert event.network_policy == {"hosts": ["api.example.test"]}
    assert event.to_dict()["network_policy"] == {"hosts": ["api.example.test"]}
