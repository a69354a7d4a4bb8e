"""Credentials the code uses and cannot read: ``egress`` headers set by the proxy, on the real local driver.

The origin is a real HTTPS server on the host's loopback (``LoopbackServer``, certificate from the test CA),
reached by name through the driver's ``resolve`` mapping; the proxy checks its certificate against that CA
(``upstream_ca``, the driver's test hook, in place of the system's trust). The code in the box trusts only its
own bundle (the system's CAs and the box's CA) and calls the API as if it were open.

The attack tests are code that tries to read the key every way it has: its environment, every file it can
read, ``/proc`` of every process it can see (the proxy runs in the app's process, outside the box's pid and
user namespaces: not among them), a request to another allowed host, a redirect there, and a header echo.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from loopback import DATA, HEADERS, NETWORK_CONFIG, REDIRECT, RESOLVE, LoopbackServer
from mainsdk import Sandbox, SandboxDeps, SandboxError, secret
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.errors import HOST_NOT_ALLOWED, INVALID_OPTION, SECRET_NOT_ALLOWED
from requires import NAMESPACES, NET_NAMESPACE

from mainsdk_local import local_sandbox_driver

pytestmark = [NAMESPACES, NET_NAMESPACE]

KEY = "owm-7f3a9c1e5b-not-for-the-box"
WEATHER = {"api.example.test": {"headers": {"X-Api-Key": secret("TEST_API_KEY")}}}
NETWORK = ["api.example.test", "other.example.test"]
TEST_CA = (DATA / "test-ca.crt").read_text()


class Built:
    def __init__(self, sandbox: Sandbox, events: list[AuditEvent]) -> None:
        self.sandbox = sandbox
        self.events = events


@pytest.fixture
def origin() -> Iterator[LoopbackServer]:
    """The HTTPS API on loopback, keeping connections open (HTTP/1.1) as a real API does."""
    server = LoopbackServer(tls=True, keep_alive=True)
    server.routes["/data/2.5/weather?q=Paris"] = ("application/json", b'{"name": "Paris", "main": {"temp": 281.2}}')
    yield server
    server.close()


@pytest.fixture
def make() -> Iterator[Callable[..., Built]]:
    made: list[Sandbox] = []

    def build(config_text: str = NETWORK_CONFIG, **driver_options: Any) -> Built:
        config = load_config_text(config_text)
        driver_options.setdefault("upstream_ca", TEST_CA)
        driver = local_sandbox_driver(
            permissions=config.permissions,
            programs={"python": "python3", "node": "node", "bash": "bash"},
            resolve=RESOLVE,
            **driver_options,
        )
        events: list[AuditEvent] = []
        deps = SandboxDeps(
            config=config, driver=driver, log=events.append, load_entrypoints=False, secret={"TEST_API_KEY": KEY}.get
        )
        sandbox = Sandbox(deps)
        made.append(sandbox)
        return Built(sandbox, events)

    yield build
    for sandbox in made:
        sandbox.close()


def key_headers(origin: LoopbackServer, host: str) -> list[list[str]]:
    """The X-Api-Key values of each request ``origin`` saw for ``host`` (repeats kept, any case)."""
    return [
        [value for name, value in seen.raw if name.lower() == "x-api-key"]
        for seen in origin.seen
        if (seen.host or "").split(":")[0] == host
    ]


def test_the_seeds_weather_example_works_with_the_key_never_in_the_box(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    built = make()
    code = (
        "import json, os, urllib.request\n"
        f"url = 'https://api.example.test:{origin.port}/data/2.5/weather?q=Paris'\n"
        "weather = json.load(urllib.request.urlopen(url))\n"
        "print(weather['name'], weather['main']['temp'])\n"
        "print(sorted(k for k, v in os.environ.items() if 'owm-' in v))\n"
    )
    result = built.sandbox.run(code, network=["api.example.test"], egress=WEATHER)
    assert result.ok, result.stderr
    assert result.stdout == "Paris 281.2\n[]\n"
    assert key_headers(origin, "api.example.test") == [[KEY]]
    (event,) = built.events
    assert event.egress == (("api.example.test", "X-Api-Key", "TEST_API_KEY"),)
    assert KEY not in json.dumps([e.to_dict() for e in built.events], default=str)


def test_a_header_the_code_sets_under_the_same_name_is_replaced_never_merged(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    # http.client opens the tunnel itself through the proxy, then sends two requests on the one connection.
    code = (
        "import http.client, os, ssl, urllib.parse\n"
        "p = urllib.parse.urlsplit(os.environ['https_proxy'])\n"
        "c = http.client.HTTPSConnection(p.hostname, p.port, context=ssl.create_default_context())\n"
        f"c.set_tunnel('api.example.test', {origin.port})\n"
        "for forged in ('forged-by-the-code', 'second'):\n"
        "    c.putrequest('GET', '/one'); c.putheader('X-Api-Key', forged); c.putheader('x-api-key', 'again')\n"
        "    c.endheaders(); r = c.getresponse(); print(r.status); r.read()\n"
    )
    result = make().sandbox.run(code, network=["api.example.test"], egress=WEATHER)
    assert result.stdout == "200\n200\n", result.stderr
    # Two requests on one kept-alive connection, each with exactly one X-Api-Key: the app's.
    assert key_headers(origin, "api.example.test") == [[KEY], [KEY]]


def test_another_allowed_host_a_redirect_to_it_and_its_header_echo_get_nothing(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    built = make()
    # other.example.test is a blind tunnel: the code checks that server's certificate itself (the test CA, added
    # to the box's bundle, which api.example.test's leaf is checked against).
    code = (
        "import json, ssl, urllib.request\n"
        f"ca = ssl.create_default_context(); ca.load_verify_locations(cadata={TEST_CA!r})\n"
        "opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ca))\n"
        f"echo = json.load(opener.open('https://other.example.test:{origin.port}{HEADERS}'))\n"
        "print('echo', [v for n, v in echo if n.lower() == 'x-api-key'])\n"
        # The allowed API redirects to the other host: the redirect is followed by the code, not by the proxy.
        f"landing = f'https://other.example.test:{origin.port}{HEADERS}'\n"
        f"r = opener.open(f'https://api.example.test:{origin.port}{REDIRECT}' + landing)\n"
        "print('redirected', [v for n, v in json.load(r) if n.lower() == 'x-api-key'])\n"
    )
    result = built.sandbox.run(code, network=NETWORK, egress=WEATHER)
    assert result.stdout == "echo []\nredirected []\n", result.stderr
    assert key_headers(origin, "other.example.test") == [[], []]
    assert key_headers(origin, "api.example.test") == [[KEY]]  # the redirecting request itself had it


def test_an_echo_by_the_api_itself_reaches_the_code_but_its_output_is_redacted(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    # What remains visible: the response body. An API that echoes its request hands the key to the code;
    # core still redacts it from the output, as for any secret of the run.
    code = (
        "import urllib.request\n"
        f"print(urllib.request.urlopen('https://api.example.test:{origin.port}{HEADERS}').read().decode())\n"
    )
    result = make().sandbox.run(code, network=["api.example.test"], egress=WEATHER)
    assert "[redacted:secret]" in result.stdout and KEY not in result.stdout


def test_the_code_cannot_read_the_key_from_its_env_files_or_any_process_it_sees(
    make: Callable[..., Built], origin: LoopbackServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Finds the key anywhere it can read (hex of it, so a hit is not redacted on the way out).
    code = (
        "import os, urllib.request\n"
        f"urllib.request.urlopen('https://api.example.test:{origin.port}/').read()\n"
        f"needle = bytes.fromhex({KEY.encode().hex()!r})\n"  # not the key itself: the code is in its cmdline
        "hits, read, pids = [], 0, [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "if needle in repr(dict(os.environ)).encode(): hits.append('env')\n"
        "def scan(path):\n"
        "    global read\n"
        "    try:\n"
        "        with open(path, 'rb') as f: data = f.read(1 << 24)\n"
        "    except OSError: return\n"
        "    read += 1\n"
        "    if needle in data: hits.append(path.encode().hex())\n"
        "for pid in pids:\n"
        "    for name in ('environ', 'cmdline', 'maps', 'mem'): scan(f'/proc/{pid}/{name}')\n"
        "for top in ('/work', '/out', '/tmp', '/etc', '/proc/self'):\n"
        "    for folder, _, names in os.walk(top):\n"
        "        for n in names: scan(os.path.join(folder, n))\n"
        "print(len(pids) < 10, read > 10, hits)\n"
    )
    result = make().sandbox.run(code, network=["api.example.test"], egress=WEATHER)
    assert result.stdout == "True True []\n", result.stderr
    assert key_headers(origin, "api.example.test") == [[KEY]]
    assert KEY not in caplog.text


def test_http2_is_not_offered_and_a_client_asking_for_it_gets_http1(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    code = (
        "import os, socket, ssl, urllib.parse\n"
        "p = urllib.parse.urlsplit(os.environ['https_proxy'])\n"
        "s = socket.create_connection((p.hostname, p.port))\n"
        f"s.sendall(b'CONNECT api.example.test:{origin.port} HTTP/1.1\\r\\n\\r\\n')\n"
        "assert s.recv(4096).startswith(b'HTTP/1.1 200')\n"
        "ctx = ssl.create_default_context(); ctx.set_alpn_protocols(['h2', 'http/1.1'])\n"
        "t = ctx.wrap_socket(s, server_hostname='api.example.test')\n"
        "print(t.selected_alpn_protocol())\n"
        "t.sendall(b'GET /h2 HTTP/1.1\\r\\nHost: api.example.test\\r\\nConnection: close\\r\\n\\r\\n')\n"
        "print(t.recv(100).split(b'\\r\\n')[0].decode())\n"
    )
    result = make().sandbox.run(code, network=["api.example.test"], egress=WEATHER)
    assert result.stdout == "http/1.1\nHTTP/1.1 200 OK\n", result.stderr
    assert key_headers(origin, "api.example.test") == [[KEY]]


def test_a_request_on_the_apis_tunnel_naming_another_host_is_refused_and_never_sent(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    code = (
        "import os, socket, ssl, urllib.parse\n"
        "p = urllib.parse.urlsplit(os.environ['https_proxy'])\n"
        "s = socket.create_connection((p.hostname, p.port))\n"
        f"s.sendall(b'CONNECT api.example.test:{origin.port} HTTP/1.1\\r\\n\\r\\n'); s.recv(4096)\n"
        "t = ssl.create_default_context().wrap_socket(s, server_hostname='api.example.test')\n"
        "t.sendall(b'GET / HTTP/1.1\\r\\nHost: other.example.test\\r\\n\\r\\n')\n"
        "print(t.recv(100).split(b'\\r\\n')[0].decode())\n"
    )
    result = make().sandbox.run(code, network=NETWORK, egress=WEATHER)
    assert result.stdout == "HTTP/1.1 421 Misdirected Request\n", result.stderr
    assert origin.seen == []


def test_a_server_whose_certificate_does_not_verify_gets_no_request(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    # Without the test CA the proxy trusts only the system's CAs, as a client would: the origin's test
    # certificate fails, and the code hears 502 before any request (or header) is sent.
    code = (
        "import urllib.request, urllib.error\n"
        "try:\n"
        f"    urllib.request.urlopen('https://api.example.test:{origin.port}/')\n"
        "except urllib.error.URLError as exc:\n"
        "    print('refused', '502' in str(exc.reason))\n"
    )
    result = make(upstream_ca=None).sandbox.run(code, network=["api.example.test"], egress=WEATHER)
    assert result.stdout == "refused True\n", result.stderr
    assert origin.seen == []


def test_a_session_keeps_the_rule_for_commands_background_processes_and_cells(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    built = make()
    url = f"https://api.example.test:{origin.port}/data/2.5/weather?q=Paris"
    with built.sandbox.create(network=["api.example.test"], egress=WEATHER) as session:
        first = session.run("python3", ["-c", f"import urllib.request; urllib.request.urlopen({url!r}).read()"])
        node = session.run("node", ["-e", f"fetch({url!r}).then(r => r.text()).then(t => console.log(t))"])
        background = session.start("python3", ["-c", f"import urllib.request; urllib.request.urlopen({url!r})"])
        background.wait()
        cell = session.run_code(f"import urllib.request\nurllib.request.urlopen({url!r}).read().decode()")
    assert first.exit_code == 0, first.stderr
    assert node.exit_code == 0 and "Paris" in node.stdout, node.stderr
    assert cell.error is None and "Paris" in repr(cell.results), cell
    # A command, a node command, a background process and a cell: each request had the header, once.
    assert key_headers(origin, "api.example.test") == [[KEY]] * 4
    commands = [e for e in built.events if e.kind in ("command", "cell")]
    assert {e.egress for e in commands} == {(("api.example.test", "X-Api-Key", "TEST_API_KEY"),)}


def test_refusals_come_before_anything_runs(make: Callable[..., Built]) -> None:
    built = make()
    with pytest.raises(SandboxError) as not_in_network:
        built.sandbox.run("print(1)", network=["other.example.test"], egress=WEATHER)
    assert not_in_network.value.code == HOST_NOT_ALLOWED and "api.example.test" in str(not_in_network.value)
    with pytest.raises(SandboxError) as not_listed:
        built.sandbox.run(
            "print(1)",
            network=["api.example.test"],
            egress={"api.example.test": {"headers": {"X-Api-Key": secret("NOT_LISTED")}}},
        )
    assert not_listed.value.code == SECRET_NOT_ALLOWED and "NOT_LISTED" in str(not_listed.value)
    with pytest.raises(SandboxError) as taken:
        built.sandbox.run("print(1)", files={".mainsdk/x": "mine"}, network=["api.example.test"], egress=WEATHER)
    assert taken.value.code == INVALID_OPTION and ".mainsdk/" in str(taken.value)
    small = make(NETWORK_CONFIG.replace("max: 64MB", "max: 4KB"))  # below any bundle, with or without system CAs
    with pytest.raises(SandboxError) as no_room:
        small.sandbox.run("print(1)", network=["api.example.test"], egress=WEATHER)
    assert no_room.value.code == INVALID_OPTION and "permissions.disk.temp.max" in str(no_room.value)
    weak = make(force_weak=True)
    with pytest.raises(SandboxError) as weak_mode:
        weak.sandbox.run("print(1)", network=["api.example.test"], egress=WEATHER)
    assert weak_mode.value.code == INVALID_OPTION and "'local' driver" in str(weak_mode.value)
    assert [e.kind for e in (*built.events, *small.events, *weak.events)] == ["refused"] * 5


def test_curl_and_pip_trust_the_box_and_plain_http_to_the_host_gets_nothing(
    make: Callable[..., Built], origin: LoopbackServer, http_server: LoopbackServer
) -> None:
    # curl reads CURL_CA_BUNDLE, pip PIP_CERT; the header goes over TLS only, never in clear text.
    wheel = f"https://api.example.test:{origin.port}/wheels/demo-1.0-py3-none-any.whl"
    code = (
        f"curl -sS https://api.example.test:{origin.port}/curl\n"
        f"curl -sS http://api.example.test:{http_server.port}/plain\n"
        f"python3 -m pip download -q --no-deps --no-index -d /tmp/w {wheel} >/dev/null 2>&1; echo pip $?\n"
    )
    result = make().sandbox.run(code, "bash", network=["api.example.test"], egress=WEATHER)
    assert result.stdout.splitlines()[:2] == [
        f"https api.example.test:{origin.port} /curl",
        f"http api.example.test:{http_server.port} /plain",
    ], result.stderr
    agents = [(seen.path, seen.headers.get("User-Agent", "").split("/")[0]) for seen in origin.seen]
    assert agents[0] == ("/curl", "curl") and agents[1][0].startswith("/wheels/") and agents[1][1] == "pip"
    assert key_headers(origin, "api.example.test") == [[KEY], [KEY]]
    assert [[v for n, v in seen.raw if n.lower() == "x-api-key"] for seen in http_server.seen] == [[]]


def test_a_rule_in_main_yaml_applies_to_every_run_given_the_host(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    configured = NETWORK_CONFIG.replace(
        "  secrets: [TEST_API_KEY]\n",
        "  secrets: [TEST_API_KEY]\n"
        "  egress: { api.example.test: { headers: { X-Api-Key: 'secret:TEST_API_KEY' } } }\n",
    )
    built = make(configured)
    code = f"import urllib.request; urllib.request.urlopen('https://api.example.test:{origin.port}/').read()"
    assert built.sandbox.run(code, network=["api.example.test"]).ok  # the call names no egress
    assert key_headers(origin, "api.example.test") == [[KEY]]
    assert built.events[-1].egress == (("api.example.test", "X-Api-Key", "TEST_API_KEY"),)
    assert built.sandbox.run("print(1)").stdout == "1\n"  # a run not given the host: no rule, no proxy


def test_an_action_gives_every_run_its_hosts_and_their_credentials(
    make: Callable[..., Built], origin: LoopbackServer
) -> None:
    built = make()
    url = f"https://api.example.test:{origin.port}/data/2.5/weather?q=Paris"
    code = f"import urllib.request; print(urllib.request.urlopen({url!r}).read().decode())"
    for session in (False, True):
        action = built.sandbox.action(name="weather.run", network=["api.example.test"], egress=WEATHER, session=session)
        assert "reaching only api.example.test" in action.description
        assert "authenticated for you" in action.description and KEY not in action.description
        result = action.run({"code": code})
        assert "Paris" in result["stdout"], result
    assert key_headers(origin, "api.example.test") == [[KEY], [KEY]]
    assert KEY not in json.dumps([e.to_dict() for e in built.events], default=str)
