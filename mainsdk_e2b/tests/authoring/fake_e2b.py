"""An authoring stand-in for E2B, written from the SDK's source (e2b 2.63.0) and E2B's documented wire.

Not a test double: it never runs in a test. It exists to author cassettes when
no E2B account is at hand: ``author.py`` runs the conformance tests in record
mode with the recorder forwarding here instead of to E2B, so every request in
a cassette is exactly what the real SDK sent, and every answer is shaped as
envd and the control plane shape theirs (Connect JSON envelopes, multipart
upload, ListDir entries). Commands really run, on this host, in a folder
standing in for ``/home/user`` of the sandbox; a few answers (network,
files of the host) are then corrected by hand in the cassettes, and say so.

Run: python fake_e2b.py  (prints the two base URLs, api and sandbox)
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import itertools
import json
import os
import queue
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "conformance" / "src"))
from mainsdk_conformance.cassette import parse_multipart

ENVD_VERSION = "0.5.4"
HOME = "/home/user"


class Box:
    """One sandbox: a folder standing in for its filesystem, and its running processes."""

    def __init__(self, sandbox_id: str) -> None:
        self.id = sandbox_id
        self.root = Path(tempfile.mkdtemp(prefix=f"fake-e2b-{sandbox_id}-"))
        (self.root / "home/user").mkdir(parents=True)
        (self.root / "tmp").mkdir()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.pids = itertools.count(400)

    def map(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def rewrite(self, line: str) -> str:
        # One pass: the stand-in root itself lives under /tmp.
        return re.sub(r"/home/user|/tmp/", lambda m: f"{self.root}{m.group(0)}", line)

    def kill(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)


class State:
    def __init__(self) -> None:
        self.boxes: dict[str, Box] = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()


STATE = State()


def envelope(flags: int, value: Any) -> bytes:
    data = json.dumps(value, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(length) if length else b""

    def send(self, status: int, payload: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response_only(status)
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if status != 204:
            self.wfile.write(payload)

    def send_json(self, status: int, value: Any) -> None:
        self.send(status, json.dumps(value, separators=(",", ":")).encode())

    def box(self) -> Box | None:
        return STATE.boxes.get(self.headers.get("E2b-Sandbox-Id", ""))

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_DELETE(self) -> None:
        self.route("DELETE")

    def route(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        body = self.body()
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        # --- control plane
        if method == "POST" and path == "/v2/sandboxes":
            request = json.loads(body)
            with STATE.lock:
                sandbox_id = f"i{next(STATE.ids):03d}fake{os.getpid() % 1000:03d}e2b"
                STATE.boxes[sandbox_id] = Box(sandbox_id)
            self.send_json(
                201,
                {
                    "templateID": request.get("templateID", "base"),
                    "sandboxID": sandbox_id,
                    "clientID": "6532622b",
                    "alias": "base",
                    "envdVersion": ENVD_VERSION,
                    "envdAccessToken": "fake-envd-access",
                    "domain": None,
                },
            )
            return
        if path.startswith("/sandboxes/"):
            sandbox_id = path.split("/")[2]
            box = STATE.boxes.get(sandbox_id)
            if box is None:
                self.send_json(404, {"code": 404, "message": f"sandbox {sandbox_id} not found"})
                return
            if method == "DELETE":
                STATE.boxes.pop(sandbox_id, None)
                box.kill()
                self.send(204)
                return
            if path.endswith("/timeout"):
                self.send(204)
                return
        # --- envd
        box = self.box()
        if box is None:
            self.send_json(502, {"code": 502, "message": "sandbox not found"})
            return
        if path == "/health":
            self.send(204)
        elif path == "/files" and method == "POST":
            self.upload(box, body, query)
        elif path == "/files" and method == "GET":
            target = box.map(query["path"])
            if not target.is_file():
                self.send_json(404, {"code": 404, "message": f"path '{query['path']}' does not exist"})
            else:
                self.send(200, target.read_bytes(), "application/octet-stream")
        elif path == "/filesystem.Filesystem/ListDir":
            self.list_dir(box, json.loads(body))
        elif path == "/process.Process/SendSignal":
            request = json.loads(body)
            proc = box.procs.get(int(request["process"]["pid"]))
            if proc is not None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            self.send_json(200, {})
        elif path == "/process.Process/Start":
            self.start(box, body)
        else:
            self.send_json(404, {"code": "unimplemented", "message": path})

    def upload(self, box: Box, body: bytes, query: dict[str, str]) -> None:
        parts = parse_multipart(body, self.headers.get("content-type", "")) or []
        written = []
        for part in parts:
            name = query.get("path") if len(parts) == 1 and query.get("path") else part["filename"]
            target = box.map(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(part["data"])
            written.append({"name": Path(name).name, "type": "file", "path": name})
        self.send_json(200, written)

    def list_dir(self, box: Box, request: dict[str, Any]) -> None:
        base = request["path"]
        root = box.map(base)
        if not root.is_dir():
            self.send_json(404, {"code": "not_found", "message": f"directory '{base}' does not exist"})
            return
        depth = int(request.get("depth") or 1)
        entries = []

        def walk(folder: Path, rel: str, level: int) -> None:
            for child in sorted(folder.iterdir()):
                path = f"{rel}/{child.name}"
                info = child.lstat()
                entry: dict[str, Any] = {
                    "name": child.name,
                    "path": path,
                    "size": str(info.st_size),
                    "mode": 0o644,
                    "permissions": "-rw-r--r--",
                    "owner": "user",
                    "group": "user",
                    "modifiedTime": "2026-11-29T12:00:00Z",
                }
                if child.is_symlink():
                    entry["type"] = "FILE_TYPE_SYMLINK"
                    entry["symlinkTarget"] = os.readlink(child)
                elif child.is_dir():
                    entry["type"] = "FILE_TYPE_DIRECTORY"
                    entry["mode"] = 0o755 | 0o40000
                    entry["permissions"] = "drwxr-xr-x"
                    entry["size"] = "4096"
                else:
                    entry["type"] = "FILE_TYPE_FILE"
                entries.append(entry)
                if child.is_dir() and not child.is_symlink() and level < depth:
                    walk(child, path, level + 1)

        walk(root, base.rstrip("/"), 1)
        self.send_json(200, {"entries": entries})

    def start(self, box: Box, body: bytes) -> None:
        request = json.loads(body[5:])
        process = request["process"]
        line = box.rewrite(process["args"][-1])
        env = dict(process.get("envs") or {})
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        proc = subprocess.Popen(
            ["/bin/bash", "-c", line],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        pid = next(box.pids)
        box.procs[pid] = proc
        chunks: queue.Queue[tuple[str, bytes]] = queue.Queue()

        def pump(name: str, stream: Any) -> None:
            while data := os.read(stream.fileno(), 65536):
                chunks.put((name, data))
            chunks.put((name, b""))

        for name, stream in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            threading.Thread(target=pump, args=(name, stream), daemon=True).start()
        self.send_response_only(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def frame(flags: int, value: Any) -> None:
            data = envelope(flags, value)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            frame(0, {"event": {"start": {"pid": pid}}})
            open_streams = 2
            while open_streams:
                name, data = chunks.get()
                if not data:
                    open_streams -= 1
                    continue
                frame(0, {"event": {"data": {name: base64.b64encode(data).decode()}}})
            code = proc.wait()
            if code < 0:
                end = {"exitCode": -1, "status": "signal: killed"}
            else:
                end = {"exitCode": code, "exited": True, "status": f"exit status {code}"}
            frame(0, {"event": {"end": end}})
            frame(2, {})
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)


def serve() -> tuple[str, str]:
    urls = []
    for _ in ("api", "sandbox"):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        urls.append(f"http://127.0.0.1:{server.server_address[1]}")
    return urls[0], urls[1]


if __name__ == "__main__":
    api, sandbox = serve()
    print(api, sandbox, flush=True)
    threading.Event().wait()
