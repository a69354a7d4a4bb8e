"""The app side of the launcher: starts the server, opens boxes, runs code in them.

The server (``launcher/``, a process of its own) is the only process that forks; this module never
forks and never runs Python between fork and exec, so it is safe in an app
with threads. Each box has its own socket to the server and is driven by the
asyncio loop that opened it; one ``Launcher`` serves boxes on several loops.

Every call waits for the server for a bounded time only (the backstop): an exec
its timeout plus ``_EXEC_GRACE``, anything else ``_CALL_GRACE`` plus the time its
own work may take. A server that does not answer in that time is stalled
(stopped, starved, wedged): it is killed, which kills every run it holds (each
run's pid 1 has PR_SET_PDEATHSIG), the call fails, or for an exec returns as
stopped at its timeout, and the ``Launcher`` starts a new server on next use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from mainsdk_local import shared_launcher
from mainsdk_local.launcher import protocol
from mainsdk_local.launcher.common import MAX_POOL
from mainsdk_local.launcher_errors import _CALL_GRACE, _TRANSFER_RATE, LauncherError, OpenFailed, _error_from
from mainsdk_local.launcher_exec import ExecResult, ExecSpec, ExecStream, _Exec

__all__ = [
    "ExecResult",
    "ExecSpec",
    "Launcher",
    "LauncherBox",
    "LauncherCollected",
    "LauncherError",
    "LauncherOutFile",
    "OpenFailed",
]

# The server is started by path (see launcher/__main__.py), never imported into the app.
_SERVER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher", "__main__.py")
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 10.0
_SHARED_IDLE = 60.0  # how long a shared server stays up with no box, snapshot or client


@attrs.frozen
class LauncherOutFile:
    """A regular file found under /out: its path relative to /out (posix) and its bytes."""

    name: str
    data: bytes


@attrs.frozen
class LauncherCollected:
    """What ``collect_out`` found: files within the byte budget, and what it skipped and why."""

    files: tuple[LauncherOutFile, ...]
    truncated: bool
    skipped: tuple[tuple[str, str], ...]


def _validate_box_path(path: str) -> None:
    """The same rule the server enforces, checked early for a clear ValueError."""
    if not isinstance(path, str):
        raise TypeError("path must be a str")
    rel = path[len("../out/") :] if path.startswith("../out/") else path
    if "\0" in path:
        raise ValueError(f"path {path!r} contains NUL")
    if not rel or rel.startswith("/"):
        raise ValueError(f"path {path!r} must be relative to /work (or start with ../out/)")
    if any(part in ("", ".", "..") for part in rel.split("/")):
        raise ValueError(f"path {path!r} has an empty, '.' or '..' segment")


def _stop_server(proc: subprocess.Popen[bytes] | None, boot: socket.socket | None) -> None:
    """Close the bootstrap socket (the server then kills everything and exits) and reap it."""
    if boot is not None:
        boot.close()
    if proc is None:
        return
    try:
        proc.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()  # its runs die with it: each run's pid 1 has PR_SET_PDEATHSIG
        proc.wait()


def _kill_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a server (it may be stopped: SIGKILL still ends it); its runs die with it."""
    with contextlib.suppress(OSError):
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)


class Launcher:
    """Runs code in boxes through a privileged launcher server started on first use.

    ``python`` is the interpreter for the server (default: the real path of
    ``sys.executable``). ``force_weak`` runs without namespaces even where they
    work, to test that mode. ``pool``: how many warm Python interpreters the server
    may keep idle (``launcher/pool.py``; 0: none), ``pool_idle`` how many seconds one nobody takes is kept
    (default 60). Thread-safe; boxes may live on different event loops.

    ``shared``: connect to the user's shared server, starting it detached if none runs (``shared_launcher.py``),
    instead of a private one that dies with this process; ``shared_folder`` where its socket is (default: the
    per-user folder), ``shared_idle`` how long a shared server it starts stays with nothing held (default 60 s).
    """

    def __init__(
        self,
        *,
        python: str | None = None,
        force_weak: bool = False,
        pool: int = 0,
        pool_idle: float | None = None,
        shared: bool = False,
        shared_folder: str | None = None,
        shared_idle: float = _SHARED_IDLE,
    ) -> None:
        self._python = python if python is not None else os.path.realpath(sys.executable)
        self._force_weak = force_weak
        if not isinstance(pool, int) or isinstance(pool, bool) or not 0 <= pool <= MAX_POOL:
            raise ValueError(f"pool must be a whole number from 0 to {MAX_POOL}")
        self._pool = pool
        if pool_idle is not None and (
            isinstance(pool_idle, bool) or not isinstance(pool_idle, (int, float)) or not 0 < pool_idle < float("inf")
        ):
            raise ValueError("pool_idle must be a positive number of seconds")
        self._pool_idle = pool_idle
        self.shared = shared
        self._shared_folder = shared_folder
        self._shared_idle = float(shared_idle)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._boot: socket.socket | None = None
        self._hello: dict[str, Any] = {}
        self._owner_pid = os.getpid()
        self._closed = False
        self._finalizer: weakref.finalize[Any, Launcher] | None = None

    def _running(self) -> bool:
        """Whether the server this Launcher holds is up: its process (private), or its connection (shared)."""
        if not self.shared:
            return self._proc is not None and self._proc.poll() is None
        if self._boot is None:
            return False
        try:
            return self._boot.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def start(self) -> None:
        """Start the server if it is not running (shared: reach the user's, or start it). Idempotent, thread-safe."""
        with self._lock:
            self._check_usable()
            if self._boot is not None:
                if self._running():
                    return
                # The server died (killed, crashed): its boxes are gone with it. Reap it and
                # start a new one rather than failing every later call.
                finalizer, self._finalizer = self._finalizer, None
                self._proc = self._boot = None
                if finalizer is not None:
                    finalizer()
            if self.shared:
                try:
                    proc, ours, hello = self._start_shared()
                except (OSError, shared_launcher.SharedLauncherError) as exc:
                    raise LauncherError(f"the shared launcher: {exc}") from exc
                self._proc, self._boot, self._hello = proc, ours, hello
                # The server outlives us: closing our connection is all there is to stop.
                self._finalizer = weakref.finalize(self, _stop_server, None, ours)
                return
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                proc = self._spawn(theirs, ["--parent", str(os.getpid())], ())
            finally:
                theirs.close()
            try:
                hello = self._read_hello(ours)
            except BaseException:
                _stop_server(proc, ours)
                raise
            self._proc, self._boot, self._hello = proc, ours, hello
            # Also runs at interpreter exit (atexit), and if the Launcher is dropped.
            self._finalizer = weakref.finalize(self, _stop_server, proc, ours)

    def _spawn(
        self, theirs: socket.socket, extra: list[str], fds: tuple[int, ...], stderr: int | None = None
    ) -> subprocess.Popen[bytes]:
        argv = [self._python, "-I", "-S", _SERVER_PATH, "--fd", str(theirs.fileno()), *extra]
        argv += ["--weak"] if self._force_weak else []
        argv += ["--pool", str(self._pool)]
        if self._pool_idle is not None:
            argv += ["--pool-idle", repr(float(self._pool_idle))]
        try:
            # No preexec_fn: the app may have threads. start_new_session keeps a
            # terminal's Ctrl-C from reaching the server before the app decides.
            return subprocess.Popen(
                argv,
                env={},
                cwd="/",
                close_fds=True,
                pass_fds=(theirs.fileno(), *fds),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            raise LauncherError(f"launcher server {self._python!r} did not start: {exc}") from exc

    def _start_shared(self) -> tuple[subprocess.Popen[bytes] | None, socket.socket, dict[str, Any]]:
        """Reach the user's shared server under its start lock, or start it: (the process we started, socket, hello)."""
        folder = shared_launcher.folder(self._shared_folder)
        name = shared_launcher.server_name([self._python, self._force_weak, self._pool, self._pool_idle])
        with shared_launcher.start_lock(folder, name) as folder_fd:
            sock = shared_launcher.connect(folder, name)
            if sock is not None:
                try:
                    return None, sock, self._read_hello(sock)
                except LauncherError:
                    sock.close()  # a server on its way out, or a broken one: one is started in its place
            listener = shared_launcher.bind(folder, name)
            log = shared_launcher.log_file(folder, name)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                extra = ["--listen", str(listener.fileno()), "--folder", str(folder_fd), "--name", name]
                extra += ["--idle-exit", repr(self._shared_idle)]
                proc = self._spawn(theirs, extra, (listener.fileno(), folder_fd), stderr=log)
            finally:
                theirs.close()
                listener.close()
                os.close(log)
            try:
                return proc, ours, self._read_hello(ours)
            except BaseException:
                ours.close()
                proc.kill()
                proc.wait()
                raise

    def _check_usable(self) -> None:
        if os.getpid() != self._owner_pid:
            raise LauncherError("this Launcher belongs to the process that created it; make a new one after fork")
        if self._closed:
            raise LauncherError("the Launcher is closed")

    def _read_hello(self, sock: socket.socket) -> dict[str, Any]:
        sock.settimeout(_START_TIMEOUT)
        decoder = protocol.Decoder()
        try:
            while True:
                try:
                    data, fds = protocol.receive(sock)
                except TimeoutError:
                    raise LauncherError(f"launcher server sent nothing in {_START_TIMEOUT:.0f}s") from None
                except (OSError, protocol.ProtocolError) as exc:
                    raise LauncherError(f"launcher server bootstrap failed: {exc}") from exc
                if not data and not fds:
                    raise LauncherError("launcher server exited during startup (see its stderr)")
                decoder.feed(data, fds)
                frames = decoder.frames()
                if frames:
                    header = frames[0].header
                    if header.get("op") == "fatal":
                        raise LauncherError(f"launcher server setup failed: {header.get('error')}")
                    if header.get("op") != "hello":
                        raise LauncherError(f"launcher server said {header!r} instead of hello")
                    return header
        finally:
            decoder.close()
            sock.settimeout(None)

    @property
    def hello(self) -> Mapping[str, Any]:
        """What the running server said it can do (a new object for each server it starts). Starts the server."""
        self.start()
        return self._hello

    @property
    def isolation(self) -> Literal["namespace", "weak"]:
        """``namespace`` when runs get their own namespaces, else ``weak``. Starts the server."""
        self.start()
        return "namespace" if self._hello.get("isolation") == "namespace" else "weak"

    @property
    def memory_enforcement(self) -> Literal["cgroup-v1", "cgroup-v2", "rlimit"]:
        """How memory limits are enforced: a cgroup per run, or RLIMIT_AS (best effort). Starts the server."""
        self.start()
        mode = self._hello.get("memory")
        if mode == "cgroup-v1":
            return "cgroup-v1"
        if mode == "cgroup-v2":
            return "cgroup-v2"
        return "rlimit"

    @property
    def socket_bound(self) -> Literal["bpf", "none"]:
        """How a box's count of inet sockets is bounded: BPF programs on its cgroup, or not at all. Starts the server.

        ``socket_bound_why`` says why not, where not.
        """
        self.start()
        return "bpf" if self._hello.get("sockets") == "bpf" else "none"

    @property
    def checkpoint_kinds(self) -> frozenset[str]:
        """The snapshots the server keeps: {"filesystem"} where overlayfs takes an idmapped layer. Starts the server."""
        self.start()
        kinds = self._hello.get("checkpoints")
        return frozenset(k for k in kinds if k == "filesystem") if isinstance(kinds, list) else frozenset()

    @property
    def can_pause(self) -> bool:
        """Whether the server pauses a box with the cgroup freezer, keeping its memory. Starts the server."""
        self.start()
        return self._hello.get("pause") is True

    def forget_snapshot(self, snapshot_id: str, tenant: str = "") -> None:
        """Delete a snapshot in the server (boxes started from it keep their files); nothing when it is gone.

        A shared launcher deletes it only for the ``tenant`` that made it.
        """
        frame = protocol.encode({"op": "forget", "snapshot": snapshot_id, "tenant": tenant})
        with self._lock:
            boot = self._boot
            if boot is None or not self._running():
                return  # the server is gone, and its snapshots with it
            with contextlib.suppress(OSError):
                boot.sendall(frame)

    @property
    def socket_bound_why(self) -> str:
        """Why this machine gives no socket bound (not root, no cgroup2, no BPF); empty where it gives one."""
        self.start()
        return str(self._hello.get("sockets_why") or "")

    async def open_box(
        self,
        *,
        disk_bytes: int,
        session: bool = True,
        max_files: int | None = None,
        memory_bytes: int | None = None,
        max_sockets: int | None = None,
        one_shot: bool = False,
        files: Mapping[str, bytes] | None = None,
        snapshot: str | None = None,
        keep: tuple[str, str, float] | None = None,
    ) -> LauncherBox:
        """Open a box: a private tmpfs of ``disk_bytes`` holding /work and /out, and its own host uid.

        ``max_files``: the most files and folders the tmpfs holds (its ``nr_inodes``; None: the kernel's
        default). An empty file costs kernel memory and no block, so only a count bounds it.

        ``memory_bytes``: a session's box (``session``) gets a memory cgroup of this limit holding all its
        execs' cgroups, so what runs at once in it (background processes, a cell interpreter, a command)
        shares the limit. Each exec still names its own limit. None: no such cgroup.

        ``max_sockets``: the most inet sockets the box holds at once, all its execs together, where the
        launcher can bound them (``socket_bound``); past it ``socket()`` fails with EMFILE. None: 4096.

        ``session``: more execs are likely to follow, so the server keeps a worker ready inside this box
        after each one (a "hot" spare). False for a box that runs one exec and closes.

        ``one_shot``: the box runs one exec and closes (implies ``session=False``), all in one exchange
        with the server: this returns without waiting for the open, ``files`` (path to bytes, written
        into the box first) follow it unanswered, and the exec sends its command behind them and asks
        for /out and the close in the same request (``LauncherBox.exec``'s ``then_collect``). The exec then
        raises ``OpenFailed`` if the open or a file failed, and nothing ran. Paths are checked here.

        ``keep`` (a shared launcher, a session's box): (session id, tenant, idle seconds): the server keeps the
        box past this process, for another process of the user to reach by naming both (``attach_box``), until
        it is closed or no process has held it for its idle time.
        """
        if isinstance(disk_bytes, bool) or not isinstance(disk_bytes, int) or disk_bytes < 4096:
            raise ValueError("disk_bytes must be an integer of at least 4096")
        if not isinstance(session, bool):
            raise ValueError("session must be True or False")
        if not isinstance(one_shot, bool):
            raise ValueError("one_shot must be True or False")
        if files and not one_shot:
            raise ValueError("files are passed to open_box only for a one_shot box; use Box.write_file")
        for path in files or {}:
            _validate_box_path(path)
        session = session and not one_shot
        if max_files is not None and (isinstance(max_files, bool) or not isinstance(max_files, int) or max_files < 64):
            raise ValueError("max_files must be None or an integer of at least 64")
        for name, value in (("memory_bytes", memory_bytes), ("max_sockets", max_sockets)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be None or a positive integer")
        request: dict[str, Any] = {
            "op": "box",
            "disk_bytes": disk_bytes,
            "session": session,
            "max_files": max_files,
            "memory_bytes": memory_bytes,
            "max_sockets": max_sockets,
        }
        if snapshot is not None:
            request["snapshot"] = snapshot  # its work/ and tmp/ start as the snapshot left them
        if keep is not None:
            # A shared launcher keeps a session's box by its id and tenant, past this process (launcher/shared.py).
            request.update(session_id=keep[0], tenant=keep[1], idle=keep[2])
        ours = await self._request_socket(request)
        box = self._box(ours, disk_bytes)
        if one_shot:
            box._pipeline_open(files or {})
            return box
        try:
            await box._await_open()
        except BaseException:
            box._teardown(LauncherError("box open failed"))
            raise
        return box

    async def attach_box(self, session_id: str, tenant: str) -> LauncherBox | None:
        """The box a shared launcher keeps for ``session_id`` of ``tenant``, on a channel of this process's own.

        None when there is none (unknown, closed, another tenant's: the server gives one answer for all), or
        this Launcher is private. ``LauncherBox.paused`` says whether it is paused.
        """
        if not self.shared:
            return None
        ours = await self._request_socket({"op": "attach", "session": session_id, "tenant": tenant})
        box = self._box(ours, 0)
        try:
            reply = await box._within(box._pending[0], _CALL_GRACE, "attach box")
        except BaseException:
            box._teardown(LauncherError("box attach failed"))
            raise
        box._pending.pop(0, None)
        if not reply.header.get("ok"):
            box._teardown(LauncherError("no such box"))
            return None
        box.host_uid = int(reply.header.get("uid", -1))
        box._disk_bytes = int(reply.header.get("disk_bytes", 0))
        box.paused = reply.header.get("paused") is True
        return box

    async def find_snapshot(self, snapshot_id: str, tenant: str) -> dict[str, Any] | None:
        """``tenant``'s snapshot ``snapshot_id`` in the shared launcher: ``expires`` and ``created`` (epoch seconds),
        ``session`` (its session's id); None when the launcher has no such live snapshot of that tenant, or is
        private."""
        if not self.shared:
            return None
        ours = await self._request_socket({"op": "find", "snapshot": snapshot_id, "tenant": tenant})

        def answer() -> dict[str, Any]:
            ours.settimeout(_CALL_GRACE)
            decoder = protocol.Decoder()
            try:
                while not (frames := decoder.frames()):
                    data, fds = protocol.receive(ours)
                    if not data and not fds:
                        raise LauncherError("the shared launcher closed the snapshot query unanswered")
                    decoder.feed(data, fds)
                return frames[0].header
            except (OSError, protocol.ProtocolError) as exc:
                raise LauncherError(f"the shared launcher's snapshot query failed: {exc}") from exc
            finally:
                decoder.close()
                ours.close()

        header = await asyncio.to_thread(answer)
        if not header.get("ok"):
            return None
        expires, created, session = header.get("expires"), header.get("created"), header.get("session")
        if not isinstance(expires, (int, float)) or not isinstance(created, (int, float)):
            return None
        return {"expires": float(expires), "created": float(created), "session": str(session or "")}

    async def _request_socket(self, request: dict[str, Any]) -> socket.socket:
        """Send ``request`` to the server with a new socket's far end; return its near end (the reply comes there)."""
        if self._boot is None or not self._running():
            # Starting takes a moment (the server probes namespaces): not on the event loop.
            await asyncio.to_thread(self.start)
        else:
            self._check_usable()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            frame = protocol.encode(dict(request, fds=1))
            with self._lock:
                self._check_usable()
                boot = self._boot
                if boot is None:
                    raise LauncherError("the Launcher is closed")
                try:
                    # Tiny and the server reads it at once; a blocking send under the lock is fine.
                    sent = socket.send_fds(boot, [frame], [theirs.fileno()])
                    if sent < len(frame):
                        boot.sendall(frame[sent:])
                except OSError as exc:
                    raise LauncherError(f"launcher server is gone: {exc}") from exc
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return ours

    def _box(self, ours: socket.socket, disk_bytes: int) -> LauncherBox:
        """A client box on ``ours``: it knows the server it is on, and what to do when that one stalls."""
        boot, server = self._boot, self._proc
        launcher = weakref.ref(self)  # a box must not keep its Launcher alive

        def on_stall() -> None:
            if not self.shared and server is not None:
                _kill_server(server)  # a shared server is other processes' too: this one lets go of it only
            owner = launcher()
            if owner is not None and boot is not None:
                owner._drop_stalled(boot)

        return LauncherBox(
            ours,
            asyncio.get_running_loop(),
            rlimit_memory=self._hello.get("memory") == "rlimit",
            namespaces=self._hello.get("isolation") == "namespace",
            node_preload=str(self._hello.get("node_preload") or "") or None,
            disk_bytes=disk_bytes,
            on_stall=on_stall,
            server=None if self.shared else server,
        )

    def _drop_stalled(self, boot: socket.socket) -> None:
        """The server on ``boot`` stalled (a private one was sent SIGKILL): forget it, so the next box starts anew."""
        with self._lock:
            if self._boot is not boot:
                return  # already replaced, or closed
            finalizer, self._finalizer = self._finalizer, None
            self._proc = self._boot = None
        if finalizer is not None:
            # Close its bootstrap socket and reap it, off the caller's event loop: a process stuck in
            # the kernel (uninterruptible sleep) would otherwise block it even after SIGKILL.
            threading.Thread(target=finalizer, name="mainsdk-local-reap", daemon=True).start()

    def stop_shared(self) -> None:
        """End the user's shared server and everything it keeps (sessions, snapshots), as a private one ends."""
        if not self.shared:
            return
        self.start()
        with self._lock:
            if self._boot is not None:
                with contextlib.suppress(OSError):
                    self._boot.sendall(protocol.encode({"op": "stop"}))
            proc = self._proc
        if proc is not None:
            proc.wait(timeout=_STOP_TIMEOUT)  # we started it: reap it
        else:
            with contextlib.suppress(TimeoutError, OSError):
                assert self._boot is not None
                self._boot.settimeout(_STOP_TIMEOUT)
                while self._boot.recv(4096):
                    pass  # until the server closes our connection as it exits

    def close(self) -> None:
        """Kill everything, stop the server and reap it; a shared server is only let go of (its kept boxes and
        snapshots stay for the user's other processes). Safe to call twice; also runs at exit."""
        with self._lock:
            if os.getpid() != self._owner_pid:
                return  # a forked child must not stop its parent's server
            self._closed = True
            finalizer, self._finalizer = self._finalizer, None
            self._proc = self._boot = None
        if finalizer is not None:
            finalizer()


class LauncherBox(ExecStream):
    """A box opened by ``Launcher.open_box``; use it from the event loop that opened it."""

    def __init__(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        *,
        rlimit_memory: bool,
        namespaces: bool,
        node_preload: str | None = None,
        disk_bytes: int = 0,
        on_stall: Callable[[], None] | None = None,
        server: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self._server = server  # the launcher server holding this box: its death is the box's
        self._rlimit_memory = rlimit_memory
        self._disk_bytes = disk_bytes
        self._on_stall = on_stall
        self.stalled = False  # the server stopped answering and was killed: this box and its files are gone
        self.namespaces = namespaces  # each exec has its own network namespace (and proxy listener)
        self.node_preload = node_preload  # where the code finds the Node proxy preload
        self._listener_handlers: dict[int, Callable[[socket.socket], None]] = {}
        self._running: dict[int, _Exec] = {}  # execs waiting for their reply, for an "output" frame
        self._sock = sock
        self._loop = loop
        self._decoder = protocol.Decoder()
        self._pending: dict[int, asyncio.Future[protocol.Frame]] = {}
        self._next_id = 1
        self._outq: list[tuple[memoryview, list[int]]] = []
        self._writing = False
        self._error: LauncherError | None = None
        self._closed = False
        self.host_uid = -1
        self.paused = False  # a shared launcher's kept box reached from another process: paused when it was
        # A one-shot box: the requests sent ahead of its exec (the open, id 0, and its files), not yet checked.
        self._opening: list[
            tuple[int, asyncio.Future[protocol.Frame], str, int]
        ] = []  # (id, reply, what, payload bytes)
        self._one_shot = False
        # The exec's pipelined /out collection: its reply and max_bytes (the server sends it unasked).
        self._then: tuple[asyncio.Future[protocol.Frame], int] | None = None
        self._exec_done = False  # the one-shot exec got its reply: the tree is gone
        sock.setblocking(False)
        self._pending[0] = loop.create_future()
        loop.add_reader(sock.fileno(), self._on_readable)

    @property
    def gone(self) -> bool:
        """Whether the box is lost for good: its channel failed, or the server that held it has died."""
        return self._error is not None or (self._server is not None and self._server.poll() is not None)

    async def _await_open(self) -> None:
        reply = await self._within(self._pending[0], _CALL_GRACE, "open box")
        self._pending.pop(0, None)
        if not reply.header.get("ok"):
            raise _error_from(reply.header, "open box")
        self.host_uid = int(reply.header.get("uid", -1))

    def _pipeline_open(self, files: Mapping[str, bytes]) -> None:
        """A one-shot box: send its files right behind the open, without waiting for either (see ``exec``)."""
        self._one_shot = True
        self._opening.append((0, self._pending[0], "open box", 0))
        for path, data in files.items():
            rid = self._next_id
            self._next_id += 1
            fut: asyncio.Future[protocol.Frame] = self._loop.create_future()
            self._pending[rid] = fut
            self._send({"op": "write", "path": path, "id": rid}, bytes(data))
            self._opening.append((rid, fut, f"write {path}", len(data)))

    async def _check_opened(self) -> None:
        """The replies to the open and the files sent ahead: ``OpenFailed`` with the first error, if any."""
        opening, self._opening = self._opening, []
        if not opening:
            return
        seconds = _CALL_GRACE + sum(size for _, _, _, size in opening) / _TRANSFER_RATE
        timer = self._loop.call_later(seconds, self._stall, "open box", seconds)
        try:
            for rid, fut, what, _ in opening:
                try:
                    reply = await fut
                except LauncherError as exc:
                    raise OpenFailed(exc) from None
                if not reply.header.get("ok"):
                    raise OpenFailed(_error_from(reply.header, what))
                if rid == 0:
                    self.host_uid = int(reply.header.get("uid", -1))
        finally:
            timer.cancel()
            for rid, _, _, _ in opening:
                self._pending.pop(rid, None)

    # -- channel -------------------------------------------------------------

    def _on_readable(self) -> None:
        while not self._closed:
            try:
                data, fds = protocol.receive(self._sock)
            except BlockingIOError:
                return
            except (OSError, protocol.ProtocolError) as exc:
                self._teardown(LauncherError(f"box channel failed: {exc}"))
                return
            if not data and not fds:
                self._teardown(LauncherError("the launcher server closed the box (it exited or the box was closed)"))
                return
            self._decoder.feed(data, fds)
            try:
                frames = self._decoder.frames()
            except protocol.ProtocolError as exc:
                self._teardown(LauncherError(f"protocol error from the launcher server: {exc}"))
                return
            for frame in frames:
                rid = frame.header.get("id")
                if frame.header.get("op") == "listener":
                    self._take_listener(frame, rid)
                    continue
                if frame.header.get("op") == "output":
                    self._take_output(frame, rid)
                    continue
                frame.close_fds()  # only listener and output frames carry descriptors
                fut = self._pending.get(rid) if isinstance(rid, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(frame)

    def _take_listener(self, frame: protocol.Frame, rid: object) -> None:
        """An exec's proxy listener arrived: give it to that exec's handler, or close it."""
        handler = self._listener_handlers.pop(rid, None) if isinstance(rid, int) else None
        if handler is None or len(frame.fds) != 1:
            frame.close_fds()
            return
        listener = socket.socket(fileno=frame.fds.pop())
        try:
            handler(listener)
        except Exception:  # noqa: BLE001 - a handler that failed has not taken it; the code then reaches nothing
            listener.close()

    def _send(self, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None:
        """Queue a frame; ``fds`` go with its first byte and are closed here once sent."""
        if self._error is not None:
            for fd in fds or []:
                os.close(fd)
            raise self._error
        self._outq.append((memoryview(protocol.encode(header, payload)), list(fds or [])))
        self._flush()

    def _flush(self) -> None:
        while self._outq and not self._closed:
            chunk, fds = self._outq[0]
            try:
                n = socket.send_fds(self._sock, [chunk], fds) if fds else self._sock.send(chunk)
            except BlockingIOError:
                break
            except OSError as exc:
                self._teardown(LauncherError(f"box channel failed: {exc}"))
                return
            for fd in fds:  # the kernel holds its own reference now
                os.close(fd)
            if n == len(chunk):
                self._outq.pop(0)
            else:
                self._outq[0] = (chunk[n:], [])
        if self._closed:
            return
        if self._outq and not self._writing:
            self._writing = True
            self._loop.add_writer(self._sock.fileno(), self._flush)
        elif not self._outq and self._writing:
            self._writing = False
            self._loop.remove_writer(self._sock.fileno())

    def _teardown(self, error: LauncherError) -> None:
        """Close the channel (the server then kills the box's runs and removes it)."""
        if self._error is None:
            self._error = error
        if self._closed:
            return
        self._closed = True
        fd = self._sock.fileno()
        if not self._loop.is_closed():
            self._loop.remove_reader(fd)
            if self._writing:
                self._loop.remove_writer(fd)
        for _, fds in self._outq:
            for x in fds:
                os.close(x)
        self._outq.clear()
        self._sock.close()
        self._decoder.close()
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(self._error)
                fut.exception()  # retrieved: no "never retrieved" warning for abandoned requests
        self._pending.clear()

    async def _within(self, fut: asyncio.Future[protocol.Frame], seconds: float, what: str) -> protocol.Frame:
        """Await a reply, at most ``seconds``: past that the server is stalled (see the module's docstring)."""
        timer = self._loop.call_later(seconds, self._stall, what, seconds)
        try:
            return await fut
        finally:
            timer.cancel()

    def _stall(self, what: str, seconds: float) -> None:
        """The server did not answer in time: kill it and fail every call waiting on this box."""
        if self._closed:
            return
        self.stalled = True
        if self._on_stall is not None:
            self._on_stall()
        self._teardown(
            LauncherError(
                f"the launcher server did not answer {what} in {seconds:.1f}s; it was killed with its runs, "
                "and the next box starts a new one"
            )
        )

    def _check_loop(self) -> None:
        if asyncio.get_running_loop() is not self._loop:
            raise LauncherError("a Box must be used from the event loop that opened it")
        if self._error is not None:
            raise self._error

    async def _request(
        self, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None, *, work: float = 0.0
    ) -> protocol.Frame:
        """Send a request and await its reply, within ``_CALL_GRACE`` plus ``work`` seconds (the backstop)."""
        rid = self._next_id
        self._next_id += 1
        fut: asyncio.Future[protocol.Frame] = self._loop.create_future()
        self._pending[rid] = fut
        try:
            self._send(dict(header, id=rid), payload, fds)
            seconds = _CALL_GRACE + work + len(payload) / _TRANSFER_RATE
            return await self._within(fut, seconds, str(header.get("op")))
        finally:
            self._pending.pop(rid, None)

    # -- API -----------------------------------------------------------------

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` under /work (or ``../out/...``), replacing a file that is there."""
        self._check_loop()
        _validate_box_path(path)
        reply = await self._request({"op": "write", "path": path}, bytes(data))
        if not reply.header.get("ok"):
            raise _error_from(reply.header, f"write {path}")

    async def read_file(self, path: str) -> bytes:
        """Read the regular file at ``path`` under /work (or ``../out/...``) without following symlinks."""
        self._check_loop()
        _validate_box_path(path)
        reply = await self._request({"op": "read", "path": path}, work=self._disk_bytes / _TRANSFER_RATE)
        if not reply.header.get("ok"):
            raise _error_from(reply.header, f"read {path}")
        return reply.payload

    async def pool_stats(self) -> dict[str, int]:
        """The server's warm pool: ``capacity`` (its size), ``ready``, ``warming``, ``hits`` and ``misses`` so far,
        and ``kinds``, how many keys of run (argv up to -c, start-up variables) it keeps track of.

        Also per kind of entry: ``<kind>_ready``, ``<kind>_warming``, ``<kind>_hits`` (e.g. ``exec_ready``), and
        ``python_ahead``: ready Python interpreters holding their key's ``-c`` text compiled ahead.
        """
        self._check_loop()
        reply = await self._request({"op": "pool"}, work=0.0)
        if not reply.header.get("ok"):
            raise _error_from(reply.header, "pool")
        found = {k: int(reply.header.get(k, 0)) for k in ("capacity", "ready", "warming", "hits", "misses", "kinds")}
        per_kind = ("_ready", "_warming", "_hits", "_ahead")
        found.update((k, v) for k, v in reply.header.items() if k.endswith(per_kind) and type(v) is int)
        return found

    async def snapshot(self, snapshot_id: str) -> float | None:
        """Freeze the box's work/ and tmp/ as ``snapshot_id`` (no exec may run); the box goes on.

        Returns when a shared launcher drops the snapshot (epoch seconds); None: a private one keeps it while it lives.
        """
        header = await self._checkpoint({"op": "snapshot", "snapshot": snapshot_id})
        expires = header.get("expires")
        return float(expires) if isinstance(expires, (int, float)) and not isinstance(expires, bool) else None

    async def pause(self) -> None:
        """Freeze every process of the box (the cgroup freezer): nothing runs until ``resume``."""
        await self._checkpoint({"op": "pause"})
        self.paused = True

    async def resume(self) -> None:
        """Thaw a paused box's processes."""
        await self._checkpoint({"op": "resume"})
        self.paused = False

    async def _checkpoint(self, header: dict[str, Any]) -> dict[str, Any]:
        self._check_loop()
        reply = await self._request(header, work=protocol.COLLECT_SECONDS)
        if not reply.header.get("ok"):
            raise _error_from(reply.header, str(header["op"]))
        return reply.header

    async def collect_out(self, *, max_bytes: int) -> LauncherCollected:
        """Regular files under /out, in name order, until ``max_bytes``; other entries are skipped with a reason."""
        work = protocol.COLLECT_SECONDS + max(max_bytes, 0) / _TRANSFER_RATE
        if self._then is not None:
            # The exec asked for it already: the server collects as soon as the run ends and sends it, then
            # closes the box (so the channel may be closed by now, after the reply came: not an error).
            if asyncio.get_running_loop() is not self._loop:
                raise LauncherError("a Box must be used from the event loop that opened it")
            fut, asked = self._then
            self._then = None
            if max_bytes != asked:
                raise ValueError(f"max_bytes {max_bytes} is not the {asked} the one-shot exec asked for")
            reply = fut.result() if fut.done() else await self._within(fut, _CALL_GRACE + work, "collect")
        else:
            self._check_loop()
            reply = await self._request({"op": "collect", "max_bytes": max_bytes}, work=work)
        h = reply.header
        if not h.get("ok"):
            raise _error_from(h, "collect /out")
        files: list[LauncherOutFile] = []
        pos = 0
        for name, size in h.get("files", []):
            files.append(LauncherOutFile(str(name), reply.payload[pos : pos + int(size)]))
            pos += int(size)
        skipped = tuple((str(n), str(r)) for n, r in h.get("skipped", []))
        return LauncherCollected(tuple(files), bool(h.get("truncated")), skipped)

    async def close(self) -> None:
        """Kill everything running in the box, remove its files and close it. Safe to call twice."""
        if self._closed:
            return
        error = LauncherError("the box is closed")
        if asyncio.get_running_loop() is not self._loop:
            # Another loop: the box's loop owns the channel; closing it there kills the runs.
            if self._loop.is_running():
                self._loop.call_soon_threadsafe(self._teardown, error)
            else:
                self._teardown(error)
            return
        if self._error is None and not (self._one_shot and self._exec_done):
            with contextlib.suppress(LauncherError):
                await self._request({"op": "close"})  # returns once the box's processes are gone
        # A one-shot box whose exec ended has no process left (its report came after the tree died), and
        # the server closes it after its /out: closing our end is all that is left, and no wait.
        self._teardown(error)

    async def __aenter__(self) -> LauncherBox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
