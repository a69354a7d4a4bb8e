"""A stand-in provider on loopback, shaped like E2B: the real HTTP server that record mode forwards to."""

from __future__ import annotations

import http.server
import json
import struct
import threading
from typing import Any

API_KEY = "e2b_" + "0123456789abcdef" * 2 + "01234567"  # looks like a real E2B key, so scrubbing must catch it
ACCESS_TOKEN = "envd-token-7f3a9c1e5b2d4f6a"  # a token only known as a JSON field's value
BINARY = bytes(range(256)) * 3


def envelope(flags: int, value: Any) -> bytes:
    """A Connect envelope holding compact JSON, as envd writes it."""
    payload = json.dumps(value, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(payload)) + payload


class StandIn:
    """The provider. ``killed`` is set by SendSignal; the process stream ends only after it."""

    def __init__(self) -> None:
        self.killed = threading.Event()
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        provider = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

            def handle_any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)  # the body is not looked at; read so the connection stays in step
                provider.requests.append((self.command, self.path, dict(self.headers)))
                if self.path == "/v2/sandboxes" and self.command == "POST":
                    if self.headers.get("x-api-key") != API_KEY:
                        return self.reply(401, b'{"code":401,"message":"Invalid API key"}')
                    answer = {"sandboxID": "sbx1", "envdAccessToken": ACCESS_TOKEN, "templateID": "base"}
                    return self.reply(201, json.dumps(answer, separators=(",", ":")).encode() + b"\n")
                envd = self.path.startswith(("/process.", "/files"))
                if envd and self.headers.get("x-access-token") != ACCESS_TOKEN:
                    return self.reply(401, b'{"message":"bad token"}')
                if self.path == "/process.Process/Start":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/connect+json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.chunk(envelope(0, {"event": {"start": {"pid": 7}}}))
                    self.chunk(envelope(0, {"event": {"data": {"stdout": "aGkK"}}}))
                    provider.killed.wait(10)  # ends only once killed, like a command past its deadline
                    self.chunk(envelope(0, {"event": {"end": {"exitCode": -1, "status": "signal: killed"}}}))
                    self.chunk(envelope(2, {}))
                    self.wfile.write(b"0\r\n\r\n")
                    return None
                if self.path == "/process.Process/SendSignal":
                    provider.killed.set()
                    return self.reply(200, b"{}")
                if self.path.startswith("/files?") and self.command == "GET":
                    return self.reply(200, BINARY, "application/octet-stream")
                if self.path == "/files" and self.command == "POST":
                    return self.reply(200, b'[{"name":"a.txt","type":"file","path":"/work/a.txt"}]')
                if self.path == "/sandboxes/sbx1" and self.command == "DELETE":
                    self.send_response(204)
                    self.end_headers()
                    return None
                return self.reply(404, b'{"message":"not found"}')

            do_GET = do_POST = do_DELETE = handle_any

        return Handler
