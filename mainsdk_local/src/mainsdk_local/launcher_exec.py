"""A launcher box's exec stream (one run: its pipes, live stdin, kill and backstop), apart to keep the box small."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

from mainsdk_local.launcher import protocol
from mainsdk_local.launcher_errors import _CALL_GRACE, _TRANSFER_RATE, LauncherError, _error_from

_DRAIN_TIMEOUT = 5.0  # after the tree is dead its pipes reach EOF at once; this only bounds a surprise
# An exec's grace stays under core's DEADLINE_GRACE, so the driver, not core, returns the timeout.
_EXEC_GRACE = 3.0
_STALL_DRAIN = 1.0  # after killing a stalled server: its runs die at once, their pipes with them
_STDERR_TAIL = 4096
# What a runtime prints when an allocation fails under RLIMIT_AS: Python, V8 (node), C++ and libc's strerror.
_OUT_OF_MEMORY = (
    b"MemoryError",
    b"JavaScript heap out of memory",
    b"Fatal process out of memory",
    b"std::bad_alloc",
    b"Cannot allocate memory",
)
_READ_CHUNK = 1 << 16


@attrs.frozen
class ExecSpec:
    """One command to run in a box.

    ``argv[0]`` is the absolute real path of the executable; it has the same path
    inside. ``env`` is the whole environment. ``readonly_paths`` are host paths
    bound read-only at the same place (an interpreter's prefix); ``hidden_paths``
    are paths inside those covered by an empty read-only directory (its
    site-packages). ``stdin`` is fed on a pipe then closed; ``None`` means /dev/null (with ``exec``'s
    ``stdin_stream``, a live stdin, it is written first and the pipe stays open for the stream).
    ``proxy``: hand the exec's proxy listener (127.0.0.1:PROXY_PORT inside its network
    namespace) to ``on_listener`` (namespace mode only; weak mode has no such namespace).
    ``proxy_port``: weak mode: the host port of the run's proxy, the only TCP port the
    code may connect to where the kernel has Landlock.
    ``overlays``: (host folder, hidden path) pairs: the folder is bound read-only over that
    hidden path instead of the empty directory (a package env over the interpreter's
    site-packages). Namespace mode only.
    ``warm``: whether the server may run it on an entry of its warm pool (``launcher/pool.py``): "python"
    or "node" when ``argv`` is that interpreter (an interpreter started ahead when the shape allows, else a
    box entered ahead whose C waits just before ``execve``), "exec" for any other program (such a box only);
    None: never, always the cold path.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    timeout: float
    memory_bytes: int | None
    max_processes: int = 256
    stdin: bytes | None = None
    readonly_paths: tuple[str, ...] = ()
    hidden_paths: tuple[str, ...] = ()
    overlays: tuple[tuple[str, str], ...] = ()
    proxy: bool = False
    proxy_port: int | None = None
    warm: Literal["python", "node", "exec"] | None = None


@attrs.frozen
class ExecResult:
    """How a command ended. ``exit_code`` is None when a signal killed it; ``stop`` says which limit did."""

    exit_code: int | None
    signal: int | None
    stop: Literal["timeout", "memory"] | None
    duration: float
    warm: bool = False  # it ran on a pool entry (the warm pool)
    warm_kind: str | None = None  # that entry's kind: "python", "exec"


class _Exec:
    """Client state of one running exec: its pipes and callbacks."""

    def __init__(self, rid: int, on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]) -> None:
        self.rid = rid
        self.kill_sent = False
        self.callbacks = {1: on_stdout, 2: on_stderr}
        self.fds: dict[int, int] = {}
        self.open_streams = 0
        self.drained = asyncio.Event()
        self.callback_error: BaseException | None = None
        self.stderr_tail = b""
        self.stalled = False  # the backstop fired while this exec waited: the server was killed
        self.stdin_fd: int | None = None  # a live stdin's write end, ours while the exec runs
        self.stdin_waiting = False  # the loop watches stdin_fd for room


class ExecStream:
    """The exec side of ``LauncherBox`` (a base class of it): runs a command and streams its output."""

    _loop: asyncio.AbstractEventLoop
    _next_id: int
    _pending: dict[int, asyncio.Future[protocol.Frame]]
    _running: dict[int, _Exec]
    _listener_handlers: dict[int, Callable[[socket.socket], None]]
    _one_shot: bool
    _then: tuple[asyncio.Future[protocol.Frame], int] | None
    _exec_done: bool
    _rlimit_memory: bool
    _error: LauncherError | None
    _closed: bool
    namespaces: bool
    if TYPE_CHECKING:  # the box's channel, which this drives (``LauncherBox``)

        def _check_loop(self) -> None: ...
        async def _check_opened(self) -> None: ...
        def _send(self, header: dict[str, Any], payload: bytes = b"", fds: list[int] | None = None) -> None: ...
        def _stall(self, what: str, seconds: float) -> None: ...

    def _take_output(self, frame: protocol.Frame, rid: object) -> None:
        """A run's output comes on other pipes (a warm node's, made before the run; see launcher/node_pool.py).

        The server sends their read ends before the run's reply; the pipes this exec made are
        read no more (nothing writes to them; the server closes their write ends).
        """
        state = self._running.get(rid) if isinstance(rid, int) else None
        if state is None or len(frame.fds) != 2:
            frame.close_fds()
            return
        for stream, fd in zip((1, 2), frame.fds, strict=True):
            self._close_stream(state, stream)
            os.set_blocking(fd, False)
            state.fds[stream] = fd
            state.open_streams += 1
            self._loop.add_reader(fd, self._on_output, state, stream)
        frame.fds.clear()
        state.drained.clear()

    async def exec(
        self,
        spec: ExecSpec,
        *,
        on_stdout: Callable[[bytes], None],
        on_stderr: Callable[[bytes], None],
        on_listener: Callable[[socket.socket], None] | None = None,
        then_collect: int | None = None,
        stdin_stream: AsyncIterable[bytes] | None = None,
    ) -> ExecResult:
        """Run ``spec`` and wait until it has exited and its output is drained.

        ``stdin_stream`` (a live stdin): the command's stdin is a pipe this client makes and keeps the write
        end of (its read end goes to the server with stdout's and stderr's): ``spec.stdin`` is written first,
        then each chunk of the stream as it comes; the pipe is closed when the stream ends or the run does.
        A chunk the command no longer reads (it closed its stdin, or ended) is dropped.

        Callbacks get each chunk of output as it arrives. Cancelling this task kills
        the whole process tree, waits until the server confirms it is gone, and
        re-raises ``CancelledError``. An exception from a callback does the same and
        is raised instead of a result. With ``spec.proxy``, ``on_listener`` gets the
        exec's proxy listener (and owns it) as soon as it exists, before or while the
        code runs.

        ``then_collect`` (a one-shot box's only exec): once the run ends the server
        collects /out up to that many bytes (``collect_out`` then takes it, with the same
        max_bytes) and closes the box, with no request in between. The open and files
        sent ahead are checked first: ``OpenFailed`` if one failed (the command did not run).
        """
        self._check_loop()
        if spec.proxy and (on_listener is None or not self.namespaces):
            raise ValueError("spec.proxy needs on_listener and namespace isolation")
        then: dict[str, int] | None = None
        if then_collect is not None:
            if isinstance(then_collect, bool) or not isinstance(then_collect, int) or then_collect < 0:
                raise ValueError("then_collect must be None or a non-negative integer")
            if not self._one_shot or self._then is not None or self._exec_done:
                raise ValueError("then_collect is for the one exec of a box opened with one_shot=True")
            collect_id = self._next_id
            self._next_id += 1
            collected: asyncio.Future[protocol.Frame] = self._loop.create_future()
            self._pending[collect_id] = collected
            self._then = (collected, then_collect)
            then = {"collect_id": collect_id, "max_bytes": then_collect}
        rid = self._next_id
        self._next_id += 1
        state = _Exec(rid, on_stdout, on_stderr)
        child_ends: list[int] = []
        try:
            for stream in (1, 2):
                r, w = os.pipe2(os.O_CLOEXEC)
                state.fds[stream] = r
                child_ends.append(w)
                os.set_blocking(r, False)  # the write end stays blocking: the code expects it
                state.open_streams += 1
                self._loop.add_reader(r, self._on_output, state, stream)
            if stdin_stream is not None:
                r, w = os.pipe2(os.O_CLOEXEC)
                child_ends.append(r)  # the read end stays blocking: the code expects it
                state.stdin_fd = w
                os.set_blocking(w, False)
        except BaseException:
            for w in child_ends:
                os.close(w)
            self._close_stdin(state)
            self._close_streams(state)
            raise
        fut: asyncio.Future[protocol.Frame] = self._loop.create_future()
        self._pending[rid] = fut
        self._running[rid] = state
        live = stdin_stream is not None
        header: dict[str, Any] = {"op": "exec", "id": rid, "spec": _spec_json(spec), "fds": 3 if live else 2}
        header["stdin"] = "live" if live else spec.stdin is not None
        if then is not None:
            header["then"] = then
        if spec.proxy and on_listener is not None:
            self._listener_handlers[rid] = on_listener  # the listener frame comes before the reply
        sent = self._loop.time()
        pump: asyncio.Future[None] | None = None
        try:
            # Closes our copies of the child's ends; a live stdin's first bytes go on its pipe, not in the frame.
            self._send(header, b"" if live else spec.stdin or b"", child_ends)
            child_ends = []
            if stdin_stream is not None:
                pump = asyncio.ensure_future(self._pump_stdin(state, spec.stdin or b"", stdin_stream))
            await self._opened_before(state, fut)
            reply = await self._await_exit(
                state, fut, spec.timeout + _EXEC_GRACE + len(spec.stdin or b"") / _TRANSFER_RATE
            )
            if reply is None and state.stalled:
                # The server stalled past the deadline and was killed, and the tree with it: a timeout.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.drained.wait(), _STALL_DRAIN)
                if state.callback_error is not None:
                    raise state.callback_error
                return ExecResult(None, signal.SIGKILL, "timeout", self._loop.time() - sent)
            if reply is None:
                raise self._error or LauncherError("the launcher server went away during exec")
            h = reply.header
            if not h.get("ok"):
                raise _error_from(h, "exec")
            if state.open_streams:
                # Something outside the tree may have kept a write end: do not hang on it.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.drained.wait(), _DRAIN_TIMEOUT)
            if state.callback_error is not None:
                raise state.callback_error
            return self._result(h, spec, state)
        finally:
            if _answered_ok(fut):
                # The server reported the run (killed or not): its tree is gone, and a one-shot box's /out
                # comes next, unasked, then the box closes (even when this raises, e.g. a callback's error).
                self._exec_done = True
            else:
                self._then = None  # no run to collect after: close() asks the server to close as usual
            for w in child_ends:
                os.close(w)
            if pump is not None:
                pump.cancel()
            self._close_stdin(state)
            self._close_streams(state)
            self._pending.pop(rid, None)
            self._running.pop(rid, None)
            self._listener_handlers.pop(rid, None)

    async def _pump_stdin(self, state: _Exec, first: bytes, chunks: AsyncIterable[bytes]) -> None:
        """Write ``first`` then each chunk to the exec's live stdin, then close it (``exec``'s ``stdin_stream``)."""
        try:
            await self._write_stdin(state, first)
            async for chunk in chunks:
                await self._write_stdin(state, chunk)
        except OSError:
            pass  # the command closed its stdin or ended: what it no longer reads is dropped
        finally:
            self._close_stdin(state)

    async def _write_stdin(self, state: _Exec, data: bytes) -> None:
        view = memoryview(data)
        while view:
            fd = state.stdin_fd
            if fd is None:
                return
            try:
                view = view[os.write(fd, view) :]
                continue
            except BlockingIOError:
                pass
            room: asyncio.Future[None] = self._loop.create_future()
            self._loop.add_writer(fd, _set_once, room)
            state.stdin_waiting = True
            try:
                await room
            finally:
                if state.stdin_fd == fd and state.stdin_waiting:
                    self._loop.remove_writer(fd)
                    state.stdin_waiting = False

    def _close_stdin(self, state: _Exec) -> None:
        fd, state.stdin_fd = state.stdin_fd, None
        if fd is None:
            return
        if state.stdin_waiting and not self._loop.is_closed():
            self._loop.remove_writer(fd)
        state.stdin_waiting = False
        os.close(fd)

    async def _opened_before(self, state: _Exec, fut: asyncio.Future[protocol.Frame]) -> None:
        """A one-shot box: check its open and files (sent ahead of this exec) before waiting for the run."""
        try:
            await self._check_opened()
        except asyncio.CancelledError:
            # The exec went out with them: if it runs, kill it, and wait until the server says so.
            self._send_kill(state)
            await self._wait_confirmed(fut)
            raise

    async def _await_exit(
        self, state: _Exec, fut: asyncio.Future[protocol.Frame], seconds: float
    ) -> protocol.Frame | None:
        timer = self._loop.call_later(seconds, self._stall_exec, state, seconds)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            # Kill the tree and wait for the server's word that it is gone, then re-raise.
            timer.cancel()
            self._send_kill(state)
            await self._wait_confirmed(fut)
            raise
        except LauncherError:
            return None
        finally:
            timer.cancel()

    def _stall_exec(self, state: _Exec, seconds: float) -> None:
        if not self._closed:
            state.stalled = True
            self._stall("an exec past its deadline", seconds)

    def _send_kill(self, state: _Exec) -> None:
        if state.kill_sent:
            return
        state.kill_sent = True
        with contextlib.suppress(LauncherError):  # no server, no tree: it died with the server
            self._send({"op": "kill", "id": state.rid})

    async def _wait_confirmed(self, fut: asyncio.Future[protocol.Frame]) -> None:
        # Bounded too: a server that cannot confirm is killed, and the tree dies with it.
        timer = self._loop.call_later(_CALL_GRACE, self._stall, "a kill", _CALL_GRACE)
        try:
            while not fut.done():
                try:
                    await asyncio.shield(fut)
                except asyncio.CancelledError:
                    continue  # cancelled again: the tree still has to be confirmed dead
                except LauncherError:
                    return
        finally:
            timer.cancel()

    def _on_output(self, state: _Exec, stream: int) -> None:
        fd = state.fds.get(stream)
        if fd is None:
            return
        for _ in range(16):  # bounded, so one noisy exec cannot starve the loop
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._close_stream(state, stream)
                return
            if stream == 2:
                state.stderr_tail = (state.stderr_tail + chunk)[-_STDERR_TAIL:]
            if state.callback_error is not None:
                continue  # keep draining so the code is not blocked on a full pipe before the kill lands
            try:
                state.callbacks[stream](chunk)
            except BaseException as exc:  # noqa: BLE001 - raised from exec() once the tree is dead
                state.callback_error = exc
                self._send_kill(state)

    def _close_stream(self, state: _Exec, stream: int) -> None:
        fd = state.fds.pop(stream, None)
        if fd is None:
            return
        if not self._loop.is_closed():
            self._loop.remove_reader(fd)
        os.close(fd)
        state.open_streams -= 1
        if state.open_streams == 0:
            state.drained.set()

    def _close_streams(self, state: _Exec) -> None:
        for stream in list(state.fds):
            self._close_stream(state, stream)

    def _result(self, h: dict[str, Any], spec: ExecSpec, state: _Exec) -> ExecResult:
        exit_code = h.get("exit_code")
        sig = h.get("signal")
        stop = h.get("stop")
        if (
            stop is None
            and spec.memory_bytes is not None
            and self._rlimit_memory
            and (exit_code not in (None, 0) or sig is not None)
            and any(marker in state.stderr_tail for marker in _OUT_OF_MEMORY)
        ):
            # Best effort: under RLIMIT_AS an allocation fails and the code reports it (Python raises, V8 and
            # C++ abort). Only that evidence makes a memory stop; a bare signal is a crash (128 + N, its name).
            stop = "memory"
        return ExecResult(
            exit_code=exit_code if isinstance(exit_code, int) else None,
            signal=sig if isinstance(sig, int) else None,
            stop="timeout" if stop == "timeout" else "memory" if stop == "memory" else None,
            duration=float(h.get("duration", 0.0)),
            warm=h.get("warm") is True,
            warm_kind=h["warm_kind"] if isinstance(h.get("warm_kind"), str) else None,
        )


def _set_once(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _answered_ok(fut: asyncio.Future[protocol.Frame]) -> bool:
    """Whether an exec's reply came and says the run ended (rather than an error, or no reply at all)."""
    return fut.done() and not fut.cancelled() and fut.exception() is None and bool(fut.result().header.get("ok"))


def _spec_json(spec: ExecSpec) -> dict[str, Any]:
    return {
        "argv": list(spec.argv),
        "env": dict(spec.env),
        "timeout": spec.timeout,
        "memory_bytes": spec.memory_bytes,
        "max_processes": spec.max_processes,
        "readonly_paths": list(spec.readonly_paths),
        "hidden_paths": list(spec.hidden_paths),
        "overlays": [list(pair) for pair in spec.overlays],
        "proxy": spec.proxy,
        "proxy_port": spec.proxy_port,
        "warm": spec.warm,
    }
