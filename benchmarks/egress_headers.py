"""What the intercepting proxy adds to an HTTPS request (``egress`` headers) against the blind tunnel.

One run on the local driver is given two names of the same HTTPS origin on 127.0.0.1 (HTTP/1.1, kept alive):
``api.bench.test`` with an ``egress`` header (the proxy ends TLS, parses the request with h11, sets the header
and sends it on over its own TLS) and ``plain.bench.test`` without (a blind CONNECT tunnel: the code's TLS goes
straight to the origin). The code times, from inside the box, interleaved request by request:

1. ``kept``: a request on a connection already open (after its first request), for each path;
2. ``new``: a request on a new connection (CONNECT, TLS handshakes, request), after the box's first one to the
   host (which also makes the host's leaf certificate).

It prints the medians and p90s per path, the added latency (intercepted minus blind) and the ratio. Goal: the
added latency of a request after the first under 2 ms (``kept``). The origin's certificate is from a CA this
script makes, given to the driver as its ``upstream_ca`` test hook and to the code for the blind path.

    python benchmarks/egress_headers.py [--requests 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import json
import ssl
import statistics
import tempfile
import threading
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from mainsdk import Sandbox, SandboxDeps, secret
from mainsdk.config import load_config_text

from mainsdk_local import local_sandbox_driver

API, PLAIN = "api.bench.test", "plain.bench.test"
CONFIG = f"""
sandbox:
  driver: local
  limits: {{ timeout: 120s }}
  network: [{API}, {PLAIN}]
  secrets: [BENCH_KEY]
network:
  allow: [{API}, {PLAIN}]
"""
GOAL_MS = 2.0


def _certificates(folder: Path) -> tuple[str, Path, Path]:
    """A CA (its PEM) and a leaf for both names signed by it (its files), for the origin."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "egress bench CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, API)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(API), x509.DNSName(PLAIN)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = folder / "origin.pem", folder / "origin.key"
    cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca.public_bytes(serialization.Encoding.PEM).decode(), cert_path, key_path


class _Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # As an API server does (nginx's tcp_nodelay): the head and the body are two writes here, and with Nagle the
    # second waits for the first's ACK, which measures the reader's delayed ACK, not the proxy.
    disable_nagle_algorithm = True

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


def _code(port: int, ca: str, requests: int) -> str:
    """The box's side: both paths, interleaved, each request timed."""
    return f"""
import http.client, json, os, ssl, time, urllib.parse
proxy = urllib.parse.urlsplit(os.environ['https_proxy'])
context = ssl.create_default_context()  # the box's bundle: the system's CAs and its own CA
context.load_verify_locations(cadata={ca!r})  # the origin's CA, for the blind path
def connect(host):
    c = http.client.HTTPSConnection(proxy.hostname, proxy.port, context=context)
    c.set_tunnel(host, {port})
    return c
def get(c):
    started = time.perf_counter()
    c.request('GET', '/'); r = c.getresponse(); r.read()
    assert r.status == 200, r.status
    return (time.perf_counter() - started) * 1000
kept = {{h: connect(h) for h in ({API!r}, {PLAIN!r})}}
times = {{'kept': {{h: [] for h in kept}}, 'new': {{h: [] for h in kept}}, 'first': {{h: [] for h in kept}}}}
for h, c in kept.items():
    times['first'][h].append(get(c))  # the first request: the handshakes, and the leaf for the api host
for _ in range({requests}):
    for h, c in kept.items():
        times['kept'][h].append(get(c))
    for h in kept:
        c = connect(h)
        started = time.perf_counter()
        get(c)
        times['new'][h].append((time.perf_counter() - started) * 1000)
        c.close()
print(json.dumps(times))
"""


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200, help="requests per path and kind in each run")
    parser.add_argument("--runs", type=int, default=3, help="runs (boxes), each with its own CA")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        ca, cert, key = _certificates(Path(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = int(server.server_address[1])
        config = load_config_text(CONFIG)
        driver = local_sandbox_driver(
            permissions=config.permissions, resolve={API: "127.0.0.1", PLAIN: "127.0.0.1"}, upstream_ca=ca
        )
        deps = SandboxDeps(config=config, driver=driver, load_entrypoints=False, secret={"BENCH_KEY": "k" * 32}.get)
        sandbox = Sandbox(deps)
        egress = {API: {"headers": {"X-Api-Key": secret("BENCH_KEY")}}}
        merged: dict[str, dict[str, list[float]]] = {kind: {API: [], PLAIN: []} for kind in ("kept", "new", "first")}
        try:
            for _ in range(args.runs):
                result = sandbox.run(_code(port, ca, args.requests), network=[API, PLAIN], egress=egress)
                if not result.ok:
                    raise SystemExit(f"the benchmark's run failed:\n{result.stderr}")
                for kind, by_host in json.loads(result.stdout).items():
                    for host, values in by_host.items():
                        merged[kind][host].extend(values)
        finally:
            sandbox.close()
            server.shutdown()
    print(f"{args.runs} runs x {args.requests} requests per path and kind, interleaved (ms, from inside the box)")
    print("  (the box's first: one per run and path, its handshakes; for the api host also its leaf certificate)")
    labels = (("kept", "on an open connection"), ("new", "on a new connection"), ("first", "the box's first"))
    for kind, label in labels:
        api, plain = merged[kind][API], merged[kind][PLAIN]
        added = statistics.median(api) - statistics.median(plain)
        print(
            f"  {label:22} blind tunnel median {statistics.median(plain):6.3f} p90 {_p(plain, 0.9):6.3f} | "
            f"intercepted median {statistics.median(api):6.3f} p90 {_p(api, 0.9):6.3f} | "
            f"added {added:+6.3f} ms, ratio {statistics.median(api) / statistics.median(plain):4.2f}"
        )
    added_kept = statistics.median(merged["kept"][API]) - statistics.median(merged["kept"][PLAIN])
    verdict = "met" if added_kept < GOAL_MS else "NOT met"
    print(f"goal: under {GOAL_MS} ms added per request after the first (kept): {verdict} ({added_kept:+.3f} ms)")


if __name__ == "__main__":
    main()
