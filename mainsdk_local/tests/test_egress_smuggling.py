"""Inside an egress host's tunnel, the proxy is a strict HTTP/1.1 intermediary: no request carries the key elsewhere.

The code opens the tunnel itself (CONNECT, then TLS with the box's CA) and writes raw requests in it. The
origin is a real HTTPS server on loopback (``RecordingOrigin``) that records every byte the proxy sends;
for the smuggling attack it frames requests by ``Content-Length`` alone, as a lenient origin or a load
balancer in front of one does, and echoes the body of a request naming ``other.example.test``, a co-hosted
service. Each ambiguous form is refused with a 400 (a 501 or 505 where RFC 9112 says so) naming what is
wrong, and no byte of it reaches the origin.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from _egress_origin import RecordingOrigin
from loopback import DATA, NETWORK_CONFIG, RESOLVE
from mainsdk import Sandbox, SandboxDeps, secret
from mainsdk.config import load_config_text
from requires import NAMESPACES, NET_NAMESPACE

from mainsdk_local import local_sandbox_driver

pytestmark = [NAMESPACES, NET_NAMESPACE]

API = "api.example.test"
OTHER = "other.example.test"
KEY = "owm-7f3a9c1e5b-not-for-the-box"
WEATHER = {API: {"headers": {"X-Api-Key": secret("TEST_API_KEY")}}}
TEST_CA = (DATA / "test-ca.crt").read_text()

# Python in the box: a tunnel opened by hand through the proxy, and a reader of one response.
TUNNEL = r"""
import json, os, socket, ssl, sys, urllib.parse
def tunnel(host, port):
    p = urllib.parse.urlsplit(os.environ["https_proxy"])
    s = socket.create_connection((p.hostname, p.port), timeout=10)
    s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        answer += s.recv(1)  # a byte at a time: no byte of the TLS that follows is taken here
    return ssl.create_default_context().wrap_socket(s, server_hostname=host)
def response(f):
    line = f.readline()
    if not line:
        return None, b""
    length = 0
    while (field := f.readline()) not in (b"\r\n", b""):
        name, _, value = field.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return line.decode("latin-1").strip(), f.read(length)
"""


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    config = load_config_text(NETWORK_CONFIG)
    driver = local_sandbox_driver(
        permissions=config.permissions,
        programs={"python": "python3", "node": "node", "bash": "bash"},
        resolve=RESOLVE,
        upstream_ca=TEST_CA,
    )
    deps = SandboxDeps(config=config, driver=driver, load_entrypoints=False, secret={"TEST_API_KEY": KEY}.get)
    built = Sandbox(deps)
    yield built
    built.close()


def run(sandbox: Sandbox, code: str) -> Any:
    result = sandbox.run(TUNNEL + code, network=[API, OTHER], egress=WEATHER)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_content_length_beside_chunked_never_smuggles_the_key_to_another_host(sandbox: Sandbox) -> None:
    # Point 1 of issue 31. The first request is chunked to the proxy and, by its Content-Length, ends after
    # the chunk-size line to an origin framing by Content-Length: the chunk's data is then a request for the
    # co-hosted echo service, whose body (300 bytes) swallows the head of the code's next request, with the
    # key the proxy sets on it; the echo comes back to the code as the answer to that next request, and the
    # code reads it hex-encoded, so no redaction of its output could catch it.
    origin = RecordingOrigin(frames="content-length")
    try:
        code = f"""
t = tunnel("{API}", {origin.port}); f = t.makefile("rb")
smuggled = b"GET /echo HTTP/1.1\\r\\nHost: {OTHER}\\r\\nContent-Length: 300\\r\\n\\r\\n"
size = b"%x\\r\\n" % len(smuggled)
t.sendall(b"POST /upload HTTP/1.1\\r\\nHost: {API}\\r\\nContent-Length: %d\\r\\n" % len(size)
          + b"Transfer-Encoding: chunked\\r\\n\\r\\n" + size + smuggled + b"\\r\\n0\\r\\n\\r\\n")
first = response(f)
try:
    t.sendall(b"POST /next HTTP/1.1\\r\\nHost: {API}\\r\\nContent-Length: 400\\r\\n\\r\\n" + b"." * 400)
    second = response(f)
except OSError as exc:
    second = (type(exc).__name__, b"")
print(json.dumps([first[0], first[1].decode(), second[0], second[1].hex()]))
"""
        first_status, first_body, _, second_hex = run(sandbox, code)
        received = origin.settled(1)
    finally:
        origin.close()
    assert KEY.encode().hex() not in second_hex  # the key never comes back to the code, in any encoding
    assert [(p.host, p.target) for p in origin.parsed if p.host.split(":")[0] != API] == []
    assert [p.target for p in origin.parsed if KEY.encode() in p.body] == []
    assert first_status == "HTTP/1.1 400 Bad Request"
    assert "Content-Length and Transfer-Encoding together" in first_body
    assert received == [(API, b"")]  # the tunnel's upstream connection got not a byte


@pytest.mark.parametrize(
    "request_head",
    [
        f"GET /two HTTP/1.1\r\nHost: {API}:1@{OTHER}\r\n\r\n",
        f"GET https://{API}:1@{OTHER}/two HTTP/1.1\r\nHost: {API}\r\n\r\n",
    ],
    ids=["host-field", "absolute-form"],
)
def test_a_host_with_userinfo_after_the_port_is_refused(sandbox: Sandbox, request_head: str) -> None:
    # Point 2 of issue 31: a URL parser (urlsplit, node's new URL) reads the host as other.example.test, so
    # an origin routing on such a reading would give the key to another tenant. Neither form is sent on.
    origin = RecordingOrigin()
    try:
        code = f"""
t = tunnel("{API}", {origin.port}); f = t.makefile("rb")
t.sendall({request_head.encode()!r})
status, body = response(f)
print(json.dumps([status, body.decode()]))
"""
        status, body = run(sandbox, code)
        received = origin.settled(1)
    finally:
        origin.close()
    assert status == "HTTP/1.1 400 Bad Request"
    assert f"'{API}:1@{OTHER}' is not host[:port]" in body
    assert received == [(API, b"")]


H = f"Host: {API}\r\n"
# Each class of head a strict intermediary refuses (RFC 9110, 9112): (status, what the answer says, head).
REFUSED = {
    "content-length-and-chunked": (
        400,
        "Content-Length and Transfer-Encoding together",
        f"POST {{t}} HTTP/1.1\r\n{H}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ),
    "chunked-and-content-length": (
        400,
        "Content-Length and Transfer-Encoding together",
        f"POST {{t}} HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ),
    "content-length-twice-equal": (
        400,
        "Content-Length more than once",
        f"POST {{t}} HTTP/1.1\r\n{H}Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    ),
    "content-length-twice-unequal": (
        400,
        "Content-Length more than once",
        f"POST {{t}} HTTP/1.1\r\n{H}Content-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
    ),
    "content-length-list": (
        400,
        "Content-Length is not one number",
        f"POST {{t}} HTTP/1.1\r\n{H}Content-Length: 5, 5\r\n\r\nhello",
    ),
    "content-length-signed": (
        400,
        "Content-Length is not one number",
        f"POST {{t}} HTTP/1.1\r\n{H}Content-Length: +5\r\n\r\nhello",
    ),
    "last-coding-not-chunked": (
        400,
        "last coding is not chunked",
        f"POST {{t}} HTTP/1.1\r\n{H}Transfer-Encoding: chunked, identity\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    ),
    "coding-identity": (
        400,
        "last coding is not chunked",
        f"POST {{t}} HTTP/1.1\r\n{H}Transfer-Encoding: identity\r\n\r\nhello",
    ),
    "chunked-twice": (
        400,
        "chunked applied twice",
        f"POST {{t}} HTTP/1.1\r\n{H}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    "coding-not-forwarded": (
        501,
        "only Transfer-Encoding: chunked is forwarded",
        f"POST {{t}} HTTP/1.1\r\n{H}Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    ),
    "chunked-in-http-1.0": (
        400,
        "Transfer-Encoding in an HTTP/1.0 request",
        f"POST {{t}} HTTP/1.0\r\n{H}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    ),
    "obs-fold": (400, "obsolete line fold", f"GET {{t}} HTTP/1.1\r\n{H}X-A: 1\r\n Host: {OTHER}\r\n\r\n"),
    "bare-lf": (400, "a bare LF or CR", f"GET {{t}} HTTP/1.1\r\n{H}X-A: 1\n\r\n"),
    "bare-cr": (400, "a bare LF or CR", f"GET {{t}} HTTP/1.1\r\n{H}X-A: 1\rHost: {OTHER}\r\n\r\n"),
    "space-before-colon": (400, "a malformed field line", f"GET {{t}} HTTP/1.1\r\n{H}Content-Length : 5\r\n\r\nhello"),
    "field-name-not-a-token": (400, "a malformed field line", f"GET {{t}} HTTP/1.1\r\n{H}X(A): 1\r\n\r\n"),
    "control-character-in-value": (400, "holds a control character", f"GET {{t}} HTTP/1.1\r\n{H}X-A: a\x01b\r\n\r\n"),
    "nul-in-value": (400, "holds a control character", f"GET {{t}} HTTP/1.1\r\n{H}X-A: a\x00b\r\n\r\n"),
    "delete-in-value": (400, "holds a control character", f"GET {{t}} HTTP/1.1\r\n{H}X-A: a\x7fb\r\n\r\n"),
    "request-line-two-spaces": (400, "a malformed request line", f"GET  {{t}} HTTP/1.1\r\n{H}\r\n"),
    "http-version-2": (505, "HTTP/1.0 and HTTP/1.1", f"GET {{t}} HTTP/2.0\r\n{H}\r\n"),
    "extension-method": (501, "the method 'PROPFIND' is not forwarded", f"PROPFIND {{t}} HTTP/1.1\r\n{H}\r\n"),
    "trace-echoes-the-key": (400, "TRACE is not forwarded", f"TRACE {{t}} HTTP/1.1\r\n{H}\r\n"),
    "host-userinfo": (400, "is not host[:port]", f"GET {{t}} HTTP/1.1\r\nHost: user@{API}\r\n\r\n"),
    "host-second-colon": (400, "the port is 1 to 65535", f"GET {{t}} HTTP/1.1\r\nHost: {API}:1:2\r\n\r\n"),
    "host-whitespace": (400, "is not host[:port]", f"GET {{t}} HTTP/1.1\r\nHost: {API} :443\r\n\r\n"),
    "host-port-not-digits": (400, "the port is 1 to 65535", f"GET {{t}} HTTP/1.1\r\nHost: {API}:https\r\n\r\n"),
    "host-empty-port": (400, "the port is 1 to 65535", f"GET {{t}} HTTP/1.1\r\nHost: {API}:\r\n\r\n"),
    "host-twice": (400, "Host more than once", f"GET {{t}} HTTP/1.1\r\n{H}{H}\r\n"),
    "host-missing": (400, "names its host in Host", "GET {t} HTTP/1.1\r\nX-A: 1\r\n\r\n"),
    "absolute-form-userinfo": (400, "is not host[:port]", f"GET https://user@{API}{{t}} HTTP/1.1\r\n{H}\r\n"),
}


@pytest.fixture(scope="module")
def refusals(sandbox: Sandbox) -> tuple[dict[str, list[str]], bytes]:
    """Every form of REFUSED, each on its own tunnel from one run: (its status and body, all the origin got)."""
    origin = RecordingOrigin()
    try:
        payloads = {name: head.replace("{t}", f"/case/{name}") for name, (_, _, head) in REFUSED.items()}
        code = f"""
answers = {{}}
for name, payload in json.loads({json.dumps(json.dumps(payloads))}).items():
    t = tunnel("{API}", {origin.port}); f = t.makefile("rb")
    t.sendall(payload.encode("latin-1"))
    status, body = response(f)
    answers[name] = [status, body.decode()]
    t.close()
print(json.dumps(answers))
"""
        answers = run(sandbox, code)
        received = origin.settled(len(payloads))
    finally:
        origin.close()
    return answers, b"".join(data for _, data in received)


@pytest.mark.parametrize("form", list(REFUSED))
def test_each_ambiguous_form_is_refused_with_its_reason_and_reaches_no_origin(
    refusals: tuple[dict[str, list[str]], bytes], form: str
) -> None:
    answers, received = refusals
    status, says, _ = REFUSED[form]
    assert f"/case/{form}".encode() not in received
    assert str(answers[form][0]).startswith(f"HTTP/1.1 {status} "), answers[form]
    assert says in answers[form][1]


def test_the_forms_a_strict_reading_keeps_still_pass_with_the_key_set_once(sandbox: Sandbox) -> None:
    # What stays allowed, on one kept-alive tunnel: an absolute-form target, a port and a trailing dot in
    # Host, chunked with an extension and a trailer, an empty line before a request (RFC 9112 2.2), a forged
    # key and a Connection option naming it. Each arrives with one framing and the app's key, once.
    origin = RecordingOrigin()
    try:
        port = origin.port
        requests = [
            f"GET https://{API}:{port}/a HTTP/1.1\r\nHost: {API}:{port}\r\n\r\n",
            "POST /b HTTP/1.1\r\nHost: API.example.test.\r\nX-Api-Key: forged\r\nTransfer-Encoding: chunked\r\n\r\n"
            "5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
            f"\r\nPOST /c HTTP/1.1\r\n{H}Connection: keep-alive, x-api-key\r\nx-api-key: x\r\n"
            "Content-Length: 2\r\n\r\nhi",
        ]
        code = f"""
t = tunnel("{API}", {port}); f = t.makefile("rb")
statuses = []
for payload in {json.dumps(requests)}:
    t.sendall(payload.encode())
    statuses.append(response(f)[0])
print(json.dumps(statuses))
"""
        statuses = run(sandbox, code)
        t = origin.settled(1)
    finally:
        origin.close()
    assert statuses == ["HTTP/1.1 200 OK"] * 3
    [(_, data)] = t
    key = f"X-Api-Key: {KEY}\r\n"
    assert (
        data
        == (
            f"GET /a HTTP/1.1\r\nHost: {API}:{port}\r\n{key}\r\n"
            f"POST /b HTTP/1.1\r\nHost: {API}\r\n{key}Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
            f"POST /c HTTP/1.1\r\nHost: {API}\r\n{key}Content-Length: 2\r\n\r\nhi"
        ).encode()
    )


def test_fuzzed_requests_are_read_alike_by_two_parsers_and_carry_the_key_to_the_host_alone(sandbox: Sandbox) -> None:
    # A fixed-seed slice of benchmarks/proxy_fuzz.py --egress: what reached the origin is read the same by
    # h11 and llhttp, and every request there is the API's, with the key once and nowhere else.
    from _egress_fuzz import fuzz_in_box

    requests, tally, found = fuzz_in_box(sandbox, seed=31, count=160, test_ca=TEST_CA)
    assert found == [], found[:3]
    assert requests >= 60 and tally.get("HTTP/1.1 200", 0) >= 20 and tally.get("HTTP/1.1 400", 0) >= 40, tally


def test_a_request_pipelined_after_a_large_body_is_read_and_sent_on_as_its_own(sandbox: Sandbox) -> None:
    # The bytes after a body (read in 64 KiB pieces) are the next request's: read from their first byte.
    from _egress_origin import read_h11

    origin = RecordingOrigin()
    try:
        code = f"""
t = tunnel("{API}", {origin.port}); f = t.makefile("rb")
t.sendall(b"POST /big HTTP/1.1\\r\\nHost: {API}\\r\\nContent-Length: 200000\\r\\n\\r\\n" + b"b" * 200000
          + b"GET /after HTTP/1.1\\r\\nHost: {API}\\r\\n\\r\\n")
print(json.dumps([response(f)[0], response(f)[0]]))
"""
        statuses = run(sandbox, code)
        [(_, data)] = origin.settled(1)
    finally:
        origin.close()
    assert statuses == ["HTTP/1.1 200 OK"] * 2
    reading = read_h11(data)
    assert [(m.target, len(m.body), m.values(b"x-api-key")) for m in reading.messages] == [
        (b"/big", 200000, [KEY.encode()]),
        (b"/after", 0, [KEY.encode()]),
    ]


def test_a_malformed_chunked_body_cuts_the_upstream_and_the_tunnel(sandbox: Sandbox) -> None:
    # The head went on before the body turned malformed: the origin must not be left waiting for the rest (nor
    # the code for an answer that will not come); both connections end, nothing past the last sound chunk sent.
    origin = RecordingOrigin(idle=60.0)
    try:
        code = f"""
t = tunnel("{API}", {origin.port}); t.settimeout(8)
head = b"POST /c HTTP/1.1\\r\\nHost: {API}\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
t.sendall(head + b"5\\r\\nhello\\r\\nzz\\r\\nGET /x")
try:
    print(json.dumps(t.recv(100).decode() or "closed"))
except TimeoutError:
    print(json.dumps("no answer"))
"""
        said = run(sandbox, code)
        received = origin.settled(1, timeout=8)
    finally:
        origin.close()
    assert said == "closed"
    [(_, data)] = received
    assert data.endswith(b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n") and b"/x" not in data
