"""Servers a test starts on the host's loopback, and the config and names that let a run be given them.

The driver's ``resolve`` mapping (RESOLVE) points the test host names at
127.0.0.1 for the proxy alone, so a run can be given a loopback server by name.
Nothing here sends a packet anywhere but 127.0.0.1.
"""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
# Host names the driver's proxy maps to 127.0.0.1 (``resolve``), so a run can be given a server the test started.
RESOLVE = {"api.example.test": "127.0.0.1", "other.example.test": "127.0.0.1", "a.wild.example.test": "127.0.0.1"}
NETWORK_HOSTS = ["api.example.test", "other.example.test", "*.wild.example.test", "127.0.0.1"]
# main.yaml cannot list it (refused at load), but the proxy must hold without that check: given by hand.
LOOPBACK_NAME = "localhost"
# Listed in network.allow only: a run can be refused it by core, and never given it by the proxy.
NOT_GIVEN = "evil.example.test"
NETWORK_CONFIG = f"""
sandbox:
  driver: local
  local: {{ python: python3, node: node, bash: bash }}
  limits: {{ timeout: 20s, memory: 256MB, output: 1MB }}
  secrets: [TEST_API_KEY]
  network: {json.dumps(NETWORK_HOSTS)}
network:
  allow: {json.dumps([*NETWORK_HOSTS, NOT_GIVEN])}
permissions:
  processes: [python3, node, bash]
  disk: {{ temp: {{ max: 64MB }} }}
"""


class Seen:
    """What a loopback server saw of one request."""

    def __init__(
        self,
        method: str,
        path: str,
        host: str | None,
        headers: dict[str, str],
        raw: list[tuple[str, str]] | None = None,
    ) -> None:
        self.method = method
        self.path = path
        self.host = host
        self.headers = headers
        self.raw = raw or []  # every header line as sent, repeats kept


REDIRECT = "/redirect?to="  # a path answered with 302 to what follows it
HEADERS = "/headers"  # a path answered with the request's headers, as JSON: a header echo


class LoopbackServer:
    """An HTTP or HTTPS server on 127.0.0.1 (a random port) answering ``<scheme> <Host> <path>``."""

    def __init__(self, *, tls: bool, keep_alive: bool = False) -> None:
        seen: list[Seen] = []
        self.seen = seen
        routes: dict[str, tuple[str, bytes]] = {}
        self.routes = routes  # path -> (content type, body), answered instead of the echo

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_GET(self) -> None:
                raw = list(self.headers.items())
                seen.append(Seen(self.command, self.path, self.headers.get("Host"), dict(raw), raw))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if self.path.startswith(REDIRECT):
                    self.send_response(302)
                    self.send_header("Location", self.path[len(REDIRECT) :])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                kind, body = routes.get(self.path.split("#")[0], ("text/plain", b""))
                if self.path == HEADERS:
                    kind, body = "application/json", json.dumps(raw).encode()
                if not body:
                    body = f"{'https' if tls else 'http'} {self.headers.get('Host')} {self.path}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(DATA / "example-test.crt", DATA / "example-test.key")
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
