"""A differential fuzz of the intercepting proxy, shared by a test slice and ``benchmarks/proxy_fuzz.py``.

Requests are generated from a seed, grammar first (methods, targets in each form, ``Host`` in sound and
hostile shapes, every framing header and its malformations, chunk sizes and extensions, trailers, line
ends, a pipelined second request), then sometimes edited byte by byte. Each goes on its own tunnel from
inside a real box to ``api.example.test``, whose requests get the egress header ``X-Api-Key`` (a few go
to ``other.example.test``, a blind tunnel). The origin records every byte; for every connection of the
API, h11 and llhttp must each read it without error and read the same requests, each for the API's host
with the key once and nowhere else (``_egress_origin.disagreements``); the blind tunnels never carry it.
"""

from __future__ import annotations

import json
import random
from typing import Any

from _egress_origin import RecordingOrigin, disagreements, read_h11
from mainsdk import secret

API = "api.example.test"
OTHER = "other.example.test"
KEY = "owm-7f3a9c1e5b-not-for-the-box"
SMUGGLED = f"GET /smuggled HTTP/1.1\r\nHost: {OTHER}\r\nContent-Length: 300\r\n\r\n"

METHODS = [
    *["GET"] * 4,
    *["POST"] * 4,
    *["PUT", "HEAD", "OPTIONS", "DELETE", "PATCH", "TRACE", "get", "CONNECT", "PROPFIND", "G\x00T", "PO ST"],
]
VERSIONS = ["HTTP/1.1"] * 8 + ["HTTP/1.0", "HTTP/1.2", "HTTP/2.0", "http/1.1", "HTTP/1.1 ", "HTTP/01.1"]
CODINGS = [
    "chunked",
    "chunked",
    "Chunked",
    " chunked",
    "chunked ",
    "chunked, chunked",
    "identity",
    "identity, chunked",
    "gzip, chunked",
    "chunked, gzip",
    "",
    ",chunked",
    "chunked,",
    "chunked\x0b",
    "chu\x00nked",
    '"chunked"',
    "chunked;q=1",
]


def hosts(port: int) -> list[str | None]:
    """Host values: the API's in every sound form, and shapes a URL parser or an origin reads as another."""
    return [
        API,
        API,
        f"{API}:{port}",
        f"{API}:443",
        "API.Example.TEST",
        f"{API}.",
        f"{API}:1@{OTHER}",
        f"user@{API}",
        f"{API}:{port}:1",
        f"{API}:",
        f"{API}:0x1bb",
        f"{API}:99999",
        f"{API} :{port}",
        f"{API}\t",
        f"{API}/x",
        f"{API}#{OTHER}",
        f"{API}\\@{OTHER}",
        OTHER,
        f"{OTHER}:{port}",
        "[::1]",
        "127.0.0.1",
        "",
        None,  # no Host
    ]


def targets(port: int) -> list[str]:
    """Request targets: origin form, absolute form for the API and for others, and what no form allows."""
    return [
        "/v1/weather?q=Paris",
        "/",
        "/a/b?c=d&e",
        f"https://{API}/abs",
        f"https://{API}:{port}/abs?q=1",
        f"http://{API}/plain",
        f"HTTPS://{API.upper()}/abs",
        f"https://{API}",
        f"https://{API}?q",
        f"https://{API}:1@{OTHER}/x",
        f"https://user@{API}/x",
        f"https://{OTHER}/x",
        f"https://{API}:{port}:1/x",
        "*",
        "x",
        "/a#frag",
        "/a b",
        "//other.example.test/x",
        "/\xff",
    ]


def chunked(rng: random.Random, body: bytes, hostile: bool) -> bytes:
    """``body`` in chunks: sizes in each case and padding, extensions, trailers, and sometimes a malformation."""
    out = b""
    at = 0
    while at < len(body):
        size = rng.randint(1, max(1, len(body) - at))
        piece = body[at : at + size]
        at += size
        digits = rng.choice(["%x", "%X", "%04x", "%x", "%x"]) % len(piece)
        extension = rng.choice(["", "", ";a=b", ";a", ' ;a="q"', ";a=b;c"])
        out += f"{digits}{extension}\r\n".encode() + piece + b"\r\n"
    trailer = rng.choice([b"", b"", b"X-Trailer: 1\r\n", b"Host: other.example.test\r\n", b"X-Api-Key: forged\r\n"])
    out += b"0" + rng.choice([b"", b";z"]) + b"\r\n" + trailer + b"\r\n"
    if hostile and rng.random() < 0.3:  # a malformed chunk: size, line end or footer
        bad = rng.choice(
            [
                (b"\r\n", b"\n"),
                (b"\r\n", b"\r"),
                (b"0\r\n", b"00000000000000000000000\r\n"),
                (b"0\r\n", b"-0\r\n"),
                (b"0\r\n", b"0x0\r\n"),
                (b"0\r\n", b"0 \r\n"),
                (b"\r\n0", b"0"),
                (b"\r\n0", b"XX\r\n0"),
            ]
        )
        out = out.replace(bad[0], bad[1], 1)
    return out


def one_request(rng: random.Random, port: int) -> bytes:
    """A request made from the grammar: sound (about half), or with any of its parts chosen hostile."""
    hostile = rng.random() < 0.5

    def pick(items: list[Any], sound: int) -> Any:  # the first ``sound`` items are sound forms
        return rng.choice(items if hostile else items[:sound])

    method = pick(METHODS, 13)
    target = pick(targets(port), 9)
    version = pick(VERSIONS, 9)
    fields: list[tuple[str, str]] = []
    host = pick(hosts(port), 6)
    if host is not None:
        fields.append(("Host", host))
        if hostile and rng.random() < 0.08:
            fields.append(("Host", rng.choice([API, OTHER])))
    body = rng.choice([b"", b"hello", b"x" * rng.randint(1, 2000), SMUGGLED.encode()])
    framing = rng.random() if hostile else rng.random() * 0.45
    payload = b""
    if framing < 0.25:
        fields.append(("Content-Length", str(len(body))))
        payload = body
    elif framing < 0.45:
        fields.append(("Transfer-Encoding", pick(CODINGS, 5)))
        payload = chunked(rng, body, hostile)
    elif framing < 0.55:  # both, in either order, the chunked body ending where Content-Length does not
        both = [("Content-Length", str(rng.choice([0, 5, len(body)]))), ("Transfer-Encoding", "chunked")]
        fields += both if rng.random() < 0.5 else both[::-1]
        payload = chunked(rng, body, hostile)
    elif framing < 0.65:
        first, second = str(len(body)), str(rng.choice([len(body), 0, 5]))
        fields += [("Content-Length", first), ("Content-Length", second)]
        payload = body
    elif framing < 0.75:
        forms = [f"{len(body)}, {len(body)}", f"+{len(body)}", f"0{len(body)}", f" {len(body)} ", "-1"]
        fields.append(("Content-Length", rng.choice([*forms, "0x5", "99999999999999999999", "1e3", ""])))
        payload = body
    elif framing < 0.82:
        fields += [("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]
        payload = chunked(rng, body, hostile)
    for _ in range(rng.randint(0, 3)):
        fields.insert(
            rng.randint(0, len(fields)),
            pick(
                [
                    ("X-Api-Key", "forged"),
                    ("x-api-key", "forged-again"),
                    ("Connection", rng.choice(["keep-alive", "close", "x-api-key", "keep-alive, host", "upgrade"])),
                    ("Upgrade", "h2c"),
                    ("TE", "trailers"),
                    ("Trailer", "X-Trailer"),
                    ("Expect", "100-continue"),
                    ("Proxy-Connection", "keep-alive"),
                    ("X-Obs", "\xe9t\xe9"),
                    ("X-Long", "v" * rng.choice([10, 1000, 9000])),
                    ("X-Ctl", "a\x01b"),
                    ("X-Nul", "a\x00b"),
                    ("X Bad", "1"),
                    ("X-Colon ", "1"),
                    ("", "empty-name"),
                    ("X-Fold", "a\r\n b"),
                    ("Content-Length ", "5"),
                    ("Transfer-Encoding\t", "chunked"),
                ],
                10,
            ),
        )
    lines = [f"{method} {target} {version}", *(f"{name}: {value}" for name, value in fields)]
    ends = ["\r\n"] * (len(lines) + 1)
    if hostile and rng.random() < 0.15:  # one line end of another kind
        ends[rng.randrange(len(ends))] = rng.choice(["\n", "\r", "\n\r", "\r\r\n"])
    head = "".join(line + end for line, end in zip([*lines, ""], ends, strict=True))
    return (("\r\n" if rng.random() < 0.05 else "") + head).encode("latin-1") + payload


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three byte edits: insert a line end or a delimiter, delete a few bytes, flip a letter's case."""
    tokens = [b"\r\n", b"\n", b"\r", b" ", b"\t", b":", b",", b";", b"0", b"\x00", b"\xff", b"\r\n\r\n"]
    for _ in range(rng.randint(1, 3)):
        at = rng.randint(0, len(data))
        kind = rng.random()
        if kind < 0.5:
            data = data[:at] + rng.choice(tokens) + data[at:]
        elif kind < 0.8:
            data = data[:at] + data[at + rng.randint(1, 4) :]
        elif data:
            at = min(at, len(data) - 1)
            data = data[:at] + data[at : at + 1].swapcase() + data[at + 1 :]
    return data


def cases(port: int, seed: int, count: int) -> list[tuple[str, bytes]]:
    """``count`` (host, bytes) cases from ``seed``: the attacks of issue 31 first, then generated ones."""
    rng = random.Random(seed)
    size = b"%x\r\n" % len(SMUGGLED)
    known = [
        (
            API,
            b"POST /a HTTP/1.1\r\nHost: %b\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%b%b\r\n0\r\n\r\n"
            % (API.encode(), len(size), size, SMUGGLED.encode()),
        ),
        (API, f"GET /b HTTP/1.1\r\nHost: {API}:1@{OTHER}\r\n\r\n".encode()),
    ]
    made = []
    for _ in range(max(0, count - len(known))):
        data = one_request(rng, port)
        if rng.random() < 0.3:
            data += one_request(rng, port)  # pipelined
        if rng.random() < 0.1:
            data = mutate(rng, data)
        made.append((OTHER if rng.random() < 0.05 else API, data))
    return (known + made)[:count]


# Python in the box: each case on its own tunnel (16 at a time), then a request that closes it, then read.
SENDER = r"""
import json, os, socket, ssl, sys, urllib.parse
from concurrent.futures import ThreadPoolExecutor
proxy = urllib.parse.urlsplit(os.environ["https_proxy"])
blind = ssl.create_default_context(); blind.load_verify_locations(cadata=sys.argv[3])
END = b"GET /end HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n"
def send(case):
    host, payload = case
    try:
        s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
        s.sendall(f"CONNECT {host}:{sys.argv[2]} HTTP/1.1\r\n\r\n".encode())
        answer = b""
        while not answer.endswith(b"\r\n\r\n"):
            answer += s.recv(1)
        context = blind if host != "api.example.test" else ssl.create_default_context()
        t = context.wrap_socket(s, server_hostname=host)
        t.sendall(payload.encode("latin-1") + END)
        t.settimeout(1.5)
        got = b""
        try:
            while chunk := t.recv(65536):
                got += chunk
        except (TimeoutError, ssl.SSLError, OSError):
            pass
        t.close()
        return got.decode("latin-1").split("\r\n")[0]
    except OSError as exc:
        return type(exc).__name__
with ThreadPoolExecutor(16) as pool:
    print(json.dumps(list(pool.map(send, json.loads(sys.argv[1])))))
"""


def fuzz_in_box(
    sandbox: Any, seed: int, count: int, test_ca: str, timeout: str = "20s"
) -> tuple[int, dict[str, int], list[tuple[bytes, list[str]]]]:
    """Send ``count`` cases from inside a box; (requests the origin received, the answers' tally, findings)."""
    origin = RecordingOrigin(idle=3.0)
    try:
        made = cases(origin.port, seed, count)
        argv = [json.dumps([(host, data.decode("latin-1")) for host, data in made]), str(origin.port), test_ca]
        code = f"import sys; sys.argv[1:] = {json.dumps(argv)}\n{SENDER}"
        result = sandbox.run(
            code,
            network=[API, OTHER],
            egress={API: {"headers": {"X-Api-Key": secret("TEST_API_KEY")}}},
            limits={"timeout": timeout},
        )
        assert result.exit_code == 0, result.stderr[-2000:]
        answers: list[str] = json.loads(result.stdout)
        received = origin.settled(len(made))
    finally:
        origin.close()
    tally: dict[str, int] = {}
    for answer in answers:
        status = " ".join(answer.split(" ")[:2]) if answer.startswith("HTTP/") else answer or "(closed)"
        tally[status] = tally.get(status, 0) + 1
    found: list[tuple[bytes, list[str]]] = []
    requests = 0
    for name, data in received:
        if name == API:
            requests += sum(m.target != b"/end" for m in read_h11(data).messages)  # not the closing one
            if why := disagreements(data, API, KEY):
                found.append((data, why))
        elif KEY.encode() in data:
            found.append((data, [f"the key on a blind tunnel to {name}"]))
    if len(received) != len(made):
        found.append((b"", [f"{len(received)} upstream connections for {len(made)} tunnels"]))
    return requests, tally, found
