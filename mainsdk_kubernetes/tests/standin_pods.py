"""The stand-in's pods: sandboxd's ProcessService (gRPC) per pod, and its REST file API behind a sandbox-router.

Test code only, never a sandbox. Each pod is a folder on this machine standing for sandboxd's root (its
``--root-dir``), with a ``/tmp`` of its own; each command is a host process in its own mount and network namespace
(no network: the template denies egress), seeing the pod's folder at ``ROOT`` and its tmp at ``/tmp``, in the
pod's memory cgroup when this machine lets us make one.

Held to agent-sandbox's sources (github kubernetes-sigs/agent-sandbox @ 2fd412d55ecae90861a101a5424a75473de97c36):

- ``packages/sandboxd/spec/process/v1/process.proto`` and ``pkg/server/process.go``: ``Start`` sends an
  ``InitEvent`` (sandboxd's own process id), stdout and stderr chunks, then an ``ExitEvent`` whose code is Go's
  ``ExitError.ExitCode()``, -1 for a process killed by a signal; an empty command is INVALID_ARGUMENT; the
  environment is the daemon's with ``env_vars`` appended over it; a missing program is NOT_FOUND. ``WriteStdin``
  of an unknown id is NOT_FOUND; ``SendSignal`` takes only SIGINT, SIGKILL, SIGTERM (else INVALID_ARGUMENT) and
  signals the process group (``pkg/processmanager/managed_process.go``: ``syscall.Kill(-pid, sig)``).
- ``packages/sandboxd/spec/filesystem/v1/filesystem.yaml`` and ``pkg/server/filesystem.go``: ``PUT
  /v1/files/{path}`` 204 (parents made, atomic rename; a folder there is 400 INVALID_ARGUMENT), ``GET`` a file's
  bytes or a folder's JSON listing, 404 NOT_FOUND, 403 PERMISSION_DENIED for a path resolving outside the root
  (``pkg/pathutil/sandbox.go``).
- ``clients/python/agentic-sandbox-client/sandbox-router/sandbox_router.py``: ``X-Sandbox-ID`` required and a DNS
  label, ``X-Sandbox-Namespace`` a DNS label (default ``default``), ``X-Sandbox-Port`` 1-65535 (default 8888),
  ``X-Sandbox-Pod-IP`` not loopback; a bad one is 400; with ``ROUTER_AUTH_TOKEN`` a missing or wrong bearer is 401.
  The router resolves the pod by ``X-Sandbox-Pod-IP``, else by the sandbox's service name.

A pod OOM-killed (its cgroup's OOM killer fired) is what Kubernetes shows for a container with
``memory.oom.group`` (cgroup v2, Kubernetes 1.28+): every process of it killed, the container restarted
(``restartCount`` + 1, ``lastState.terminated.reason: OOMKilled``).
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import grpc
from mainsdk_kubernetes._proto import process_pb2 as pb

# The stand-in an authoring run (``conformance/author.py``) records against, shared with the conftest in the same
# process; None otherwise.
ACTIVE: Any = None
ROOT = "/mnt/workspace"  # where a pod's root is seen by its commands (sandbox.kubernetes.root in the tests)
MOUNTS = (
    'mount -t tmpfs none /mnt && mkdir /mnt/workspace && mount --bind "$1" /mnt/workspace '
    '&& mount --bind "$2" /tmp && { [ -z "$3" ] || echo $$ > "$3"; } && shift 3 && exec "$@"'
)
DNS_LABEL = re.compile(r"^[a-z0-9](?:[-a-z0-9]*[a-z0-9])?$")
CGROUPS = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory controller
UNIFIED = Path("/sys/fs/cgroup")  # cgroup v2, where it is the whole hierarchy (cgroup.controllers at its top)
FAULTY = 1_000_000  # the process id a test's faulty stream gives in its InitEvent
SIGNALS = {pb.SIGNAL_SIGINT: signal.SIGINT, pb.SIGNAL_SIGKILL: signal.SIGKILL, pb.SIGNAL_SIGTERM: signal.SIGTERM}
# The container's own environment (sandboxd's): what the driver's wrapper must drop unless a command is given it.
CONTAINER_ENV = {
    "HOSTNAME": "standin",
    "KUBERNETES_SERVICE_HOST": "10.96.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "SANDBOXD_GRPC_ADDR": "localhost:9090",
    "SANDBOXD_REST_ADDR": "localhost:8080",
}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def memory_cgroups() -> bool:
    """Whether this machine lets the stand-in give its pods a memory limit (a cgroup it can make and remove)."""
    pod = Pod("0.0.0.0", "probe", 64 * 1024 * 1024, tempfile.gettempdir())
    made = pod.cgroup is not None
    pod.remove()
    return made


class Pod:
    """One pod: its folders, its memory cgroup, its processes and its containers' status."""

    def __init__(self, ip: str, name: str, memory: int | None, base: str) -> None:
        self.ip, self.name, self.memory = ip, name, memory
        self.top = tempfile.mkdtemp(prefix=f"standin-{name}-", dir=base)
        self.root = os.path.join(self.top, "root")
        self.tmp = os.path.join(self.top, "tmp")
        self.home = os.path.join(self.tmp, "home")
        for folder in (self.root, self.tmp, self.home):
            os.makedirs(folder, exist_ok=True)
        self.restarts = 0
        self.oom_at: str | None = None
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self.ids = itertools.count(1)
        self.cgroup: Path | None = None
        self.events = "memory.oom_control"  # where the cgroup counts its OOM kills (v1; v2: memory.events)
        group_name = f"mainsdk-standin-{os.getpid()}-{name}"
        if memory is not None and os.access(CGROUPS, os.W_OK):
            with contextlib.suppress(OSError):
                group = CGROUPS / group_name
                group.mkdir()
                (group / "memory.limit_in_bytes").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (group / "memory.memsw.limit_in_bytes").write_text(str(memory))
                self.cgroup = group
        elif memory is not None and (UNIFIED / "cgroup.controllers").exists() and os.access(UNIFIED, os.W_OK):
            with contextlib.suppress(OSError):
                with contextlib.suppress(OSError):
                    (UNIFIED / "cgroup.subtree_control").write_text("+memory")
                group = UNIFIED / group_name
                group.mkdir()
                (group / "memory.max").write_text(str(memory))
                with contextlib.suppress(OSError):
                    (group / "memory.swap.max").write_text("0")
                self.events = "memory.events"
                self.cgroup = group
        self.lock = threading.Lock()

    def ooms(self) -> int:
        """The OOM kills the pod's cgroup has seen."""
        if self.cgroup is None:
            return 0
        with contextlib.suppress(OSError):
            for line in (self.cgroup / self.events).read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def kill_all(self) -> None:
        """SIGKILL every process of the pod (the container's end)."""
        for proc in list(self.processes.values()):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                for pid in (self.cgroup / "cgroup.procs").read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)

    def status(self) -> dict[str, Any]:
        """The pod's ``status.containerStatuses`` as the kubelet reports them."""
        container: dict[str, Any] = {
            "name": "sandbox",
            "image": "standin/python-sandboxd",
            "imageID": "",
            "ready": True,
            "started": True,
            "restartCount": self.restarts,
            "state": {"running": {"startedAt": _now()}},
            "lastState": {},
        }
        if self.oom_at is not None:
            container["lastState"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": self.oom_at,
                    "finishedAt": self.oom_at,
                }
            }
        return {"phase": "Running", "podIP": self.ip, "podIPs": [{"ip": self.ip}], "containerStatuses": [container]}

    def remove(self) -> None:
        """Kill everything and remove the pod's folders and cgroup."""
        self.kill_all()
        for proc in list(self.processes.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        shutil.rmtree(self.top, ignore_errors=True)
        if self.cgroup is not None:
            for _ in range(50):
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)

    def resolve(self, path: str) -> str | None:
        """``path`` under the root, links resolved; None when it resolves outside (sandboxd's SanitizePath)."""
        joined = os.path.realpath(os.path.join(self.root, path.lstrip("/")))
        real_root = os.path.realpath(self.root)
        return joined if joined == real_root or joined.startswith(real_root + os.sep) else None


class ProcessService:
    """sandboxd's ProcessService for one pod (a grpcio server of its own, on loopback)."""

    def __init__(self, pod: Pod, bind: str = "127.0.0.1:0", owner: Pods | None = None) -> None:
        self.pod = pod
        self.owner = owner
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
        handlers = {
            "Start": grpc.unary_stream_rpc_method_handler(
                self.start, pb.StartRequest.FromString, pb.StartResponse.SerializeToString
            ),
            "WriteStdin": grpc.unary_unary_rpc_method_handler(
                self.write_stdin, pb.WriteStdinRequest.FromString, pb.WriteStdinResponse.SerializeToString
            ),
            "SendSignal": grpc.unary_unary_rpc_method_handler(
                self.send_signal, pb.SendSignalRequest.FromString, pb.SendSignalResponse.SerializeToString
            ),
        }
        self.server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("process.v1.ProcessService", handlers)]
        )
        self.port = self.server.add_insecure_port(bind)
        self.server.start()

    def start(self, request: pb.StartRequest, context: grpc.ServicerContext) -> Any:
        pod = self.pod
        command = list(request.config.command)
        if self.owner is not None:
            self.owner.starts.append(command)
            if self.owner.fault is not None and self.owner.fault_for(command):
                yield from self.owner.fault(command, context)
                return
        if not command:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "command is required")
        if shutil.which(command[0]) is None and not os.path.exists(command[0]):
            context.abort(grpc.StatusCode.NOT_FOUND, "failed to start command: command or path not found")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp/home", **CONTAINER_ENV, **request.config.env_vars}
        cgroup = str(pod.cgroup / "cgroup.procs") if pod.cgroup is not None else ""
        argv = ["unshare", "-m", "-n", "sh", "-c", MOUNTS, "sh", pod.root, pod.tmp, cgroup, *command]
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=pod.root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # sandboxd's Setpgid: the process leads a group of its own
        )
        ooms = pod.ooms()
        with pod.lock:
            pid = next(pod.ids)
            pod.processes[pid] = proc
        events: queue.Queue[tuple[str, bytes] | None] = queue.Queue()
        killed = threading.Event()

        def read(pipe: Any, stream: str) -> None:
            for chunk in iter(lambda: os.read(pipe.fileno(), 4096), b""):  # sandboxd's --stream-chunk-size
                events.put((stream, chunk))
            events.put(None)

        def watch() -> None:  # the container's OOM: everything in it killed at once, and it restarts
            while proc.poll() is None and not killed.is_set():
                if pod.ooms() > ooms:
                    killed.set()
                    pod.kill_all()
                    pod.restarts += 1
                    pod.oom_at = _now()
                    events.put(None)
                    events.put(None)
                    return
                time.sleep(0.005)

        for pipe, stream in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            threading.Thread(target=read, args=(pipe, stream), daemon=True).start()
        if pod.cgroup is not None:
            threading.Thread(target=watch, daemon=True).start()
        yield pb.StartResponse(init=pb.InitEvent(process_id=pid))
        ended = 0
        while ended < 2:
            item = events.get()
            if item is None:
                ended += 1
            elif item[0] == "stdout":
                yield pb.StartResponse(stdout=item[1])
            else:
                yield pb.StartResponse(stderr=item[1])
        code = proc.wait()
        if not killed.is_set() and pod.ooms() > ooms:
            killed.set()
            pod.kill_all()
            pod.restarts += 1
            pod.oom_at = _now()
        with pod.lock:
            pod.processes.pop(pid, None)
        if killed.is_set():  # sandboxd died with its container: the stream breaks
            context.abort(grpc.StatusCode.UNAVAILABLE, "the container was OOM-killed")
        yield pb.StartResponse(exit=pb.ExitEvent(exit_code=code if code >= 0 else -1))

    def _process(self, pid: int, context: grpc.ServicerContext) -> subprocess.Popen[bytes]:
        with self.pod.lock:
            proc = self.pod.processes.get(pid)
        if proc is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"process {pid} not found")
        assert proc is not None
        return proc

    def write_stdin(self, request: pb.WriteStdinRequest, context: grpc.ServicerContext) -> pb.WriteStdinResponse:
        if self.owner is not None:
            self.owner.stdin_writes += 1
        proc = self._process(request.process_id, context)
        assert proc.stdin is not None
        try:
            if request.WhichOneof("payload") == "eof":
                proc.stdin.close()
            else:
                proc.stdin.write(request.input)
                proc.stdin.flush()
        except (OSError, ValueError) as exc:
            context.abort(grpc.StatusCode.INTERNAL, f"failed to write stdin: {exc}")
        return pb.WriteStdinResponse()

    def send_signal(self, request: pb.SendSignalRequest, context: grpc.ServicerContext) -> pb.SendSignalResponse:
        if self.owner is not None:
            self.owner.signals.append(int(request.signal))
        if self.owner is not None and self.owner.fault is not None and request.process_id == FAULTY:
            return pb.SendSignalResponse()  # the faulty stream has no process: the signal is only counted
        proc = self._process(request.process_id, context)
        sig = SIGNALS.get(request.signal)
        if sig is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported or unspecified signal: {request.signal}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        return pb.SendSignalResponse()


class Pods:
    """Every pod of the stand-in, by IP; a pod named in a replayed cassette is made when first dialled."""

    def __init__(self, memory: int | None, token: str | None = None, direct: bool = False) -> None:
        self.memory = memory
        self.token = token
        # direct: each pod listens at its own IP (a loopback address the API server gives it), sandboxd's ports
        # 9090 and 8080, as a pod reached in the cluster (reach: pod-ip, no router): nothing to map.
        self.direct = direct
        self.rest: dict[str, http.server.ThreadingHTTPServer] = {}
        # A test's fault: given a command and its context, the stream's events instead of running it.
        self.fault: Callable[[list[str], grpc.ServicerContext], Iterator[pb.StartResponse]] | None = None
        self.fault_for: Callable[[list[str]], bool] = lambda command: True  # which commands get the fault
        self.starts: list[list[str]] = []  # every command Start was sent, in order
        self.signals: list[int] = []  # every SendSignal's signal
        self.stdin_writes = 0  # every WriteStdin
        self.rest_requests: list[str] = []  # every REST request, "METHOD path"
        self.base = tempfile.mkdtemp(prefix="mainsdk-k8s-standin-", dir="/var/tmp")  # not under /tmp
        self.pods: dict[str, Pod] = {}
        self.services: dict[str, ProcessService] = {}
        self.by_name: dict[str, str] = {}
        self.lock = threading.Lock()
        self.router = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _router(self))
        self.router.daemon_threads = True
        threading.Thread(target=self.router.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def router_url(self) -> str:
        return f"http://127.0.0.1:{self.router.server_address[1]}"

    def pod(self, ip: str, name: str | None = None) -> Pod:
        """The pod at ``ip`` (made if new)."""
        with self.lock:
            if ip not in self.pods:
                self.pods[ip] = Pod(ip, name or f"pod-{ip.replace('.', '-')}", self.memory, self.base)
                if self.direct:
                    self.services[ip] = ProcessService(self.pods[ip], f"{ip}:9090", self)
                    rest = http.server.ThreadingHTTPServer((ip, 8080), _router(self, self.pods[ip]))
                    rest.daemon_threads = True
                    threading.Thread(target=rest.serve_forever, args=(0.05,), daemon=True).start()
                    self.rest[ip] = rest
                else:
                    self.services[ip] = ProcessService(self.pods[ip], owner=self)
            if name:
                self.by_name[name] = ip
            return self.pods[ip]

    def address(self, host: str, port: int) -> str:
        """Where to dial ``host:port`` of a pod: its ProcessService on loopback (9090), else the router."""
        self.pod(host)
        if port == 9090:
            return f"127.0.0.1:{self.services[host].port}"
        raise AssertionError(f"the stand-in dials only the ProcessService (9090) directly, not {host}:{port}")

    def drop(self, ip: str) -> None:
        """The pod deleted: its processes killed, its folders gone."""
        with self.lock:
            pod, service = self.pods.pop(ip, None), self.services.pop(ip, None)
        if service is not None:
            service.server.stop(0)
        rest = self.rest.pop(ip, None)
        if rest is not None:
            rest.shutdown()
            rest.server_close()
        if pod is not None:
            pod.remove()

    def close(self) -> None:
        for ip in list(self.pods):
            self.drop(ip)
        self.router.shutdown()
        self.router.server_close()
        shutil.rmtree(self.base, ignore_errors=True)


def _router(pods: Pods, direct: Pod | None = None) -> type[http.server.BaseHTTPRequestHandler]:
    """The sandbox-router's handler (or, given ``direct``, that pod's own sandboxd REST listener)."""

    class Router(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes = b"", kind: str = "application/json") -> None:
            self.send_response(status)
            if status != 204:
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if status != 204:
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str) -> None:
            self._send(status, json.dumps({"code": code, "message": message}).encode())

        def _detail(self, status: int, detail: str) -> None:  # FastAPI's HTTPException body
            self._send(status, json.dumps({"detail": detail}).encode())

        def _pod(self) -> Pod | None:
            pods.rest_requests.append(f"{self.command} {urlsplit(self.path).path}")
            if direct is not None:
                return direct
            if pods.token is not None:
                auth = (self.headers.get("Authorization") or "").split()
                if len(auth) != 2 or auth[0].lower() != "bearer" or auth[1] != pods.token:
                    self._detail(401, "Missing or invalid Authorization header.")
                    return None
            sandbox = self.headers.get("X-Sandbox-ID")
            if not sandbox:
                self._detail(400, "X-Sandbox-ID header is required.")
                return None
            if len(sandbox) > 63 or not DNS_LABEL.match(sandbox):
                self._detail(400, "Invalid sandbox ID format.")
                return None
            if not DNS_LABEL.match(self.headers.get("X-Sandbox-Namespace", "default")):
                self._detail(400, "Invalid namespace format.")
                return None
            try:
                port = int(self.headers.get("X-Sandbox-Port", "8888"))
                assert 1 <= port <= 65535
            except (ValueError, AssertionError):
                self._detail(400, "Invalid port format.")
                return None
            ip = self.headers.get("X-Sandbox-Pod-IP") or pods.by_name.get(sandbox)
            if ip is None or port != 8080:  # nothing else listens in the stand-in's pods
                self._detail(502, f"Could not connect to the backend sandbox: {sandbox}")
                return None
            return pods.pod(ip)

        def _path(self, pod: Pod) -> str | None:
            raw = urlsplit(self.path).path
            if not raw.startswith("/v1/files/"):
                self._error(404, "NOT_FOUND", "no such endpoint")
                return None
            target = pod.resolve(unquote(raw.removeprefix("/v1/files/")))
            if target is None:
                self._error(403, "PERMISSION_DENIED", "path escapes sandbox root")
            return target

        def do_PUT(self) -> None:
            pod = self._pod()
            if pod is None:
                return
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            target = self._path(pod)
            if target is None:
                return
            if os.path.isdir(target):
                self._error(400, "INVALID_ARGUMENT", "target path is a directory")
                return
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".sandboxd-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(temp, 0o644)
            os.replace(temp, target)
            self._send(204)

        def do_GET(self) -> None:
            pod = self._pod()
            if pod is None:
                return
            target = self._path(pod)
            if target is None:
                return
            if not os.path.exists(target):
                self._error(404, "NOT_FOUND", "path does not exist within the sandbox")
            elif os.path.isdir(target):
                entries = [
                    {
                        "name": e.name,
                        "size": e.stat().st_size,
                        "type": "directory" if e.is_dir() else "file",
                        "modified_at": _now(),
                    }
                    for e in os.scandir(target)
                ]
                self._send(200, json.dumps({"path": target, "entries": entries}).encode())
            else:
                with open(target, "rb") as f:
                    self._send(200, f.read(), "application/octet-stream")

    return Router
