"""A stand-in for Vercel Sandbox REST API v1 on loopback, used only to author cassettes.

We have no Vercel account, so the conformance cassettes are authored: the
suite runs in record mode with its recorder forwarding here instead of to
api.vercel.com, and ``author.py`` marks what it wrote ``made: authored``. The
shapes (paths, bodies, answers, NDJSON logs, errors) follow the v1 docs and
Vercel's own v1 client (``vercel`` 0.5.9, ``vercel/_internal/sandbox``);
``test_vercel_sdk.py`` replays the cassettes through that client to check it.

Commands run as plain host processes in a private temporary folder standing
for ``/vercel/sandbox``, in their own mount namespace with a private
``/tmp`` (the host's files are not the VM's). A kill signals the one process,
as Vercel documents; stop kills everything. Not a sandbox: test code only.
"""

from __future__ import annotations

import gzip
import http.server
import io
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = "/vercel/sandbox"
PYTHON = os.path.realpath(sys.executable)
BASE = "/var/tmp"  # not under /tmp, which each command gets empty


class Command:
    """One process and its output, in order, as log lines."""

    def __init__(self, cmd_id: str, sandbox: Sandbox, body: dict[str, Any]) -> None:
        self.id = cmd_id
        self.body = body
        self.started = int(time.time() * 1000)
        self.began = time.monotonic()
        self.duration: float | None = None  # seconds from the command request to its exit (author.py paces by it)
        self.lines: list[dict[str, str]] = []
        self.cond = threading.Condition()
        self.exit_code: int | None = None
        args = [sandbox.map(a) for a in body.get("args", [])]
        env = {"PATH": f"{sandbox.bin}:/usr/bin:/bin", "HOME": sandbox.dir, **body.get("env", {})}
        # A private /tmp: the VM does not share the app's files.
        wrapper = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs none /tmp && unset PWD && exec "$@"', "sh"]
        self.proc = subprocess.Popen(
            [*wrapper, body["command"], *args],
            cwd=sandbox.map(body.get("cwd", ROOT)),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, "stderr"), daemon=True),
        ]
        for reader in self.readers:
            reader.start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _read(self, pipe: Any, stream: str) -> None:
        for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
            with self.cond:
                self.lines.append({"stream": stream, "data": chunk.decode("utf-8", "replace")})
                self.cond.notify_all()

    def _reap(self) -> None:
        code = self.proc.wait()
        for reader in self.readers:
            reader.join()
        with self.cond:
            self.duration = time.monotonic() - self.began
            self.exit_code = code if code >= 0 else 128 - code
            self.cond.notify_all()

    def view(self, sandbox_id: str, finished: bool) -> dict[str, Any]:
        view = {
            "id": self.id,
            "name": self.body["command"],
            "args": self.body.get("args", []),
            "cwd": self.body.get("cwd", ROOT),
            "sandboxId": sandbox_id,
            "exitCode": self.exit_code if finished else None,
            "startedAt": self.started,
        }
        return view


class Sandbox:
    """A folder standing for a sandbox's ``/vercel/sandbox``."""

    def __init__(self, sandbox_id: str, body: dict[str, Any]) -> None:
        self.id = sandbox_id
        self.body = body
        self.dir = tempfile.mkdtemp(prefix="vercel-sim-", dir=BASE)
        self.bin = tempfile.mkdtemp(prefix="vercel-sim-bin-", dir=BASE)
        for name, target in (("python3", PYTHON), ("node", shutil.which("node")), ("bash", "/bin/bash")):
            if target and (name != "node" or body.get("runtime", "").startswith("node")):
                os.symlink(target, os.path.join(self.bin, name))
        if body.get("runtime", "").startswith("python"):
            os.symlink(PYTHON, os.path.join(self.bin, "python3.13"))
        self.commands: dict[str, Command] = {}
        self.status = "running"
        self.created = int(time.time() * 1000)

    def map(self, path: str) -> str:
        """A sandbox path in the host folder."""
        return self.dir + path[len(ROOT) :] if path == ROOT or path.startswith(ROOT + "/") else path

    def view(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "memory": 4096,
            "vcpus": self.body.get("resources", {}).get("vcpus", 2),
            "region": "iad1",
            "runtime": self.body.get("runtime", "node24"),
            "timeout": self.body.get("timeout", 300000),
            "status": self.status,
            "requestedAt": self.created,
            "startedAt": self.created,
            "createdAt": self.created,
            "updatedAt": self.created,
            "cwd": ROOT,
            "networkPolicy": self.body.get("networkPolicy", {"mode": "allow-all"}),
        }

    def stop(self) -> None:
        if self.status == "stopped":
            return
        self.status = "stopped"
        for command in self.commands.values():
            if command.proc.poll() is None:
                command.proc.kill()
        # What the code left in the background dies with the VM.
        subprocess.run(["pkill", "-KILL", "-f", self.dir], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.bin, ignore_errors=True)


class Simulator:
    """The v1 endpoints the driver and Vercel's v1 client use, on 127.0.0.1."""

    def __init__(self) -> None:
        self.sandboxes: dict[str, Sandbox] = {}
        self.ids = itertools.count(1)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        for sandbox in self.sandboxes.values():
            sandbox.stop()
        self.server.shutdown()

    def durations(self) -> dict[str, float]:
        """Each finished command's run time, by command id (ids are unique within one simulator)."""
        return {
            cmd_id: command.duration
            for sandbox in self.sandboxes.values()
            for cmd_id, command in sandbox.commands.items()
            if command.duration is not None
        }

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        sim = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                sim.handle(self)

            do_POST = do_GET

        return Handler

    def handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        body = h.rfile.read(int(h.headers.get("content-length") or 0))
        segments = parts.path.strip("/").split("/")
        if segments[:2] != ["v1", "sandboxes"]:
            return _json(h, 404, _error("not_found", "no such endpoint"))
        if len(segments) == 2 and h.command == "POST":
            request = json.loads(body)
            created = Sandbox(f"sbx_sim{next(self.ids):04d}", request)
            self.sandboxes[created.id] = created
            return _json(h, 200, {"sandbox": created.view(), "routes": []})
        sandbox = self.sandboxes.get(segments[2])
        if sandbox is None:
            return _json(h, 404, _error("sandbox_not_found", "Sandbox not found"))
        rest = segments[3:]
        if sandbox.status == "stopped" and rest != ["stop"]:
            return _json(h, 410, _error("sandbox_stopped", "Sandbox is stopped"))
        if rest == ["stop"]:
            sandbox.stop()
            return _json(h, 200, {"sandbox": sandbox.view()})
        if rest == ["extend-timeout"]:
            sandbox.body["timeout"] = sandbox.body.get("timeout", 300000) + json.loads(body)["duration"]
            return _json(h, 200, {"sandbox": sandbox.view()})
        if rest == ["fs", "write"]:
            base = sandbox.map(h.headers.get("x-cwd", ROOT))
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(body))) as archive:
                archive.extractall(base, filter="data")
            return _json(h, 200, {})
        if rest == ["fs", "read"]:
            path = Path(sandbox.map(json.loads(body)["path"]))
            if not path.is_file():
                return _json(h, 404, _error("file_not_found", "File not found"))
            data = path.read_bytes()
            h.send_response(200)
            h.send_header("content-type", "application/octet-stream")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return None
        if rest == ["cmd"]:
            started = Command(f"cmd_sim{next(self.ids):04d}", sandbox, json.loads(body))
            sandbox.commands[started.id] = started
            return _json(h, 200, {"command": started.view(sandbox.id, False)})
        command = sandbox.commands.get(rest[1]) if len(rest) >= 2 and rest[0] == "cmd" else None
        if command is None:
            return _json(h, 404, _error("command_not_found", "Command not found"))
        if rest[2:] == [] and h.command == "GET":
            if query.get("wait") == ["true"]:
                with command.cond:
                    command.cond.wait_for(lambda: command.exit_code is not None)
            return _json(h, 200, {"command": command.view(sandbox.id, command.exit_code is not None)})
        if rest[2:] == ["kill"]:
            if command.proc.poll() is None:
                command.proc.send_signal(int(json.loads(body or b"{}").get("signal", signal.SIGTERM)))
            return _json(h, 200, {})
        if rest[2:] == ["logs"]:
            return self._logs(h, command)
        return _json(h, 404, _error("not_found", "no such endpoint"))

    def _logs(self, h: http.server.BaseHTTPRequestHandler, command: Command) -> None:
        h.send_response(200)
        h.send_header("content-type", "application/x-ndjson")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        sent = 0
        while True:
            with command.cond:
                command.cond.wait_for(lambda s=sent: len(command.lines) > s or command.exit_code is not None)  # type: ignore[misc]
                lines = command.lines[sent:]
                done = command.exit_code is not None and len(command.lines) == sent + len(lines)
            for line in lines:
                data = (json.dumps(line) + "\n").encode()
                h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
            sent += len(lines)
            if done:
                break
        h.wfile.write(b"0\r\n\r\n")


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _json(h: http.server.BaseHTTPRequestHandler, status: int, value: Any) -> None:
    data = json.dumps(value).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
