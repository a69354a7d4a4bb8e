"""Cells: Python code run in an interpreter that lives as long as its session, as a notebook runs it.

The interpreter is the kernel package ``mainsdk/kernel/`` (standard library only), started in the session's box with the
driver's ordinary exec hook and left running; each cell is one line the app sends on that command's live
stdin (``Command.input``), a channel nothing in the box can write. So any driver that can keep one command
running in a session, and feed it a live stdin, gets cells, and the interpreter is a process in the box under
the box's limits. See ``mainsdk.kernel`` for the protocol: a supervisor that holds the token and watches an
executor process, which runs the cells.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import contextvars
import inspect
import json
import re
import secrets as token
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from decimal import Decimal
from typing import Any

import attrs

from mainsdk import arguments, errors, languages
from mainsdk.audit import code_sha256
from mainsdk.driver import Command, ExecOutcome, InputStream, StopReason
from mainsdk.errors import SandboxError
from mainsdk.hosts import host_covered
from mainsdk.kernel.protocol import MARK, TEXT_LIMIT, UNSUPPORTED_EXIT, WATCHDOG_EXIT
from mainsdk.kernel_start import kernel_command
from mainsdk.lifecycle import CommandPlan, Ended, Ending, stop_reason
from mainsdk.limits import QUIET_RELEASE, Listener, OutputCollector, cost_of, signal_status
from mainsdk.redact import NameRedactor
from mainsdk.rich import INLINE_LIMIT, Display, RichResult, group_displays, is_binary, is_mime, rich_entry
from mainsdk.secrets import SecretRef
from mainsdk.session_runtime import SessionRuntime
from mainsdk.units import MAX_TIMEOUT

GRACE = 1.0  # after KeyboardInterrupt, how long a cell has to stop before the interpreter is ended
BACKSTOP = 3.0  # past the grace, how long the app waits before it kills the interpreter itself
_EXTENSIONS = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/svg+xml": "svg",
    "application/pdf": "pdf",
    "text/html": "html",
    "text/markdown": "md",
    "text/latex": "tex",
    "application/json": "json",
    "application/javascript": "js",
    "text/plain": "txt",
}
# The hosts ``%pip install`` needs: a session whose hosts cover both installs into itself; otherwise it says how
# to pin the package in ``sandbox.packages`` instead (nothing is installed).
PACKAGE_INDEX = ("pypi.org", "files.pythonhosted.org")
LIVE_OVERHEAD = 64  # bytes a live result counts for beyond its data (an empty one is not free)


@attrs.frozen
class CellError:
    """The exception a cell raised: its class name, its ``str`` and the traceback text (the cell's frames)."""

    name: str
    value: str
    traceback: str


OutputCallback = Callable[[str, bytes], Awaitable[None] | None]
ResultCallback = Callable[[RichResult], Awaitable[None] | None]
ErrorCallback = Callable[[CellError], Awaitable[None] | None]


@attrs.frozen
class CellCallbacks:
    """What a cell tells the app as it runs: ``on_output(stream, data)`` each chunk of output, ``on_result(result)``
    each rich result, ``on_error(error)`` the cell's error. Each may be a plain function or (on the async API) an
    ``async def``, awaited in order before ``run_code`` returns."""

    on_output: object = None
    on_result: object = None
    on_error: object = None


@attrs.frozen
class CellResult:
    """What one cell did. A stopped cell has ``stop`` set; it is returned, not raised.

    ``results``: every form of every display output, in the order they came: each ``display()``, each
    matplotlib figure shown or left open (``image/png`` and its ``text/plain``), and the final expression's
    (``main``), each with all the MIME forms IPython's formatter gave (``text/plain`` always, ``text/html``,
    ``image/png`` ...). ``displays`` groups them by output. ``error``: the exception the cell raised.
    ``state_kept``: whether the interpreter (variables, imports, open files) survived the cell.
    ``restarted``: the interpreter had died (a kill at a limit, a crash) and this cell ran in a new, empty one.
    """

    id: str
    session_id: str
    number: int
    stdout: str
    stderr: str
    results: tuple[RichResult, ...]
    error: CellError | None
    stop: StopReason | None
    state_kept: bool
    restarted: bool
    duration: float
    cost: Decimal
    results_dropped: int = 0  # rich results that did not fit in ``limits.files``
    hosts_refused: tuple[str, ...] = ()
    hosts_refused_dropped: int = 0

    @property
    def ok(self) -> bool:
        """Whether the cell ran to its end: no stop, no error."""
        return self.stop is None and self.error is None

    @property
    def text(self) -> str | None:
        """The final expression's ``repr`` (its ``text/plain`` form), or None when it had no value."""
        main = [r for r in self.results if r.main] or [r for r in self.results if r.display is None]
        for result in main:
            if result.mime == "text/plain" and isinstance(result.data, str):
                return result.data
        return None

    @property
    def displays(self) -> tuple[Display, ...]:
        """The cell's display outputs in order, each with all its forms (``Display.main``: the final expression's)."""
        return group_displays(self.results)

    @property
    def stop_code(self) -> str | None:
        """The seed's code for the stop, or None."""
        return errors.STOP_CODES[self.stop] if self.stop else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the result (as ``RunResult.to_dict``): each rich result with its display index."""
        data = attrs.asdict(self)
        data["cost"] = str(self.cost)
        data["results"] = [{**rich_entry(r), "display": r.display, "main": r.main} for r in self.results]
        data["ok"], data["text"], data["stop_code"] = self.ok, self.text, self.stop_code
        return data

    def to_json(self) -> str:
        """``to_dict`` as JSON text."""
        return json.dumps(self.to_dict())


class _OutputLines:
    """A cell's output as ``on_output`` gets it: each line one chunk, as a notebook's clients read it.

    A line that came in pieces (one ``print`` of several arguments, a pipe read that cut it) is joined: its start
    is held until its newline comes, or for ``QUIET_RELEASE`` at most (the pause after which the redactor, too,
    releases what it held), or until ``HELD_LIMIT`` bytes of it are held; a chunk of several lines is one call per
    line. Fed on the event loop's thread or a driver's own (the timer is armed on the loop either way).
    """

    HELD_LIMIT = 1 << 20

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._held: dict[str, bytes] = {"stdout": b"", "stderr": b""}
        self._lock = threading.Lock()
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None

    def feed(self, stream: str, data: bytes) -> None:
        """A released chunk of ``stream``: its complete lines go on now, one call each; the rest is held."""
        with self._lock:
            held = self._held[stream] + data
            end = held.rfind(b"\n") + 1
            complete, rest = (held[:end], held[end:]) if len(held) - end < self.HELD_LIMIT else (held, b"")
            self._held[stream] = rest
        *lines, last = complete.split(b"\n")
        for line in lines:
            self._listener(stream, line + b"\n")
        if last:
            self._listener(stream, last)  # a start of a line past HELD_LIMIT
        if rest:
            self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = self._loop.call_later(QUIET_RELEASE, self.flush)

    def flush(self) -> None:
        """Release every held start of a line now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for stream in ("stdout", "stderr"):
            with self._lock:
                held, self._held[stream] = self._held[stream], b""
            if held:
                self._listener(stream, held)


class _KernelStream:
    """The interpreter's output: the current cell's stdout and stderr, and the frame that ends each cell.

    Output made between cells (a thread the last cell left running) goes to the next cell, up to its limit.
    """

    def __init__(self, mark_out: bytes, end_err: bytes, frame_limit: int) -> None:
        self._mark_out = mark_out
        self._end_err = end_err
        self._frame_limit = frame_limit
        self._held = {"stdout": b"", "stderr": b""}
        self._frame: bytearray | None = None
        self._stray: list[tuple[str, bytes]] = []
        self._stray_bytes = 0
        self.collector: OutputCollector | None = None
        self.frames: list[bytes] = []
        self.on_display: Callable[[dict[str, Any]], None] | None = None  # the running cell's live display frames
        self.frame_ready = self.err_ready = self.frame_too_large = False
        self.live_bytes = 0  # the running cell's live display frames, in bytes: bounded as one frame is
        self._news: asyncio.Future[None] | None = None  # what ``until`` waits on: one future, not a task per event

    def begin(self, collector: OutputCollector) -> None:
        """Start a cell: its output goes to ``collector`` (the stray output first)."""
        self.collector = collector
        self.frames.clear()
        self.frame_ready = self.err_ready = False
        self.live_bytes = 0
        for stream, data in self._stray:
            self._emit(stream, data)
        self._stray.clear()
        self._stray_bytes = 0

    def end(self) -> None:
        """The cell is over: what comes now is stray output."""
        self.collector = None

    async def until(self, ready: Callable[[], bool], task: asyncio.Future[Any], timeout: float) -> None:
        """Wait until ``ready()`` holds (looked at after each chunk of output), ``task`` ends or ``timeout`` passes."""
        if ready() or task.done():
            return
        loop = asyncio.get_running_loop()
        self._news, self._ready = loop.create_future(), ready
        timer = loop.call_later(timeout, self._poke, True)
        task.add_done_callback(self._poke)
        try:
            await self._news
        finally:
            timer.cancel()
            task.remove_done_callback(self._poke)

    def _poke(self, always: object = False) -> None:
        if self._news is not None and not self._news.done() and (always is not False or self._ready()):
            self._news.set_result(None)

    def _emit(self, stream: str, data: bytes) -> None:
        if not data:
            return
        if self.collector is not None:
            getattr(self.collector, stream)(data)
        elif self._stray_bytes < self._frame_limit:
            self._stray.append((stream, data))
            self._stray_bytes += len(data)

    def stdout(self, data: bytes) -> None:
        """Take a chunk of the interpreter's stdout."""
        self._stdout(data)
        self._poke()

    def _stdout(self, data: bytes) -> None:
        while data:
            if self._frame is not None:
                newline = data.find(b"\n")
                part = data if newline < 0 else data[:newline]
                self._frame += part
                if len(self._frame) > self._frame_limit:
                    self._frame = None
                    self.frame_too_large = True
                    return
                if newline < 0:
                    return
                raw = bytes(self._frame)
                self._frame = None
                data = data[newline + 1 :]
                live = None
                if raw.startswith(b'{"cell": ') and b'"display": ' in raw and b'"code_sha256": ' not in raw:
                    # Every live frame of a cell counts, parsed or not: past the bound of one frame in all, the
                    # cell stops at ``output`` (the supervisor's own, lower bound stops it first, state kept).
                    self.live_bytes += len(raw)
                    if self.live_bytes > self._frame_limit:
                        self.frame_too_large = True
                        return
                    live = _parse_frame(raw)
                if live is not None and "display" in live and "code_sha256" not in live:
                    # A display output while the cell runs (``on_result``), never the cell's end.
                    if self.on_display is not None and self.collector is not None:
                        self.on_display(live)
                    continue
                self.frames.append(raw)
                self.frame_ready = True
                continue
            held = self._held["stdout"] + data
            at = held.find(self._mark_out)
            if at < 0:
                keep = _mark_start(held, self._mark_out)
                self._emit("stdout", held[: len(held) - keep])
                self._held["stdout"] = held[len(held) - keep :]
                return
            self._emit("stdout", held[:at])
            self._held["stdout"] = b""
            self._frame = bytearray()
            data = held[at + len(self._mark_out) :]

    def stderr(self, data: bytes) -> None:
        """Take a chunk of the interpreter's stderr."""
        held = self._held["stderr"] + data
        while True:
            at = held.find(self._end_err)
            if at < 0:
                break
            self._emit("stderr", held[:at])
            self.err_ready = True
            held = held[at + len(self._end_err) :]
        keep = _mark_start(held, self._end_err)
        self._emit("stderr", held[: len(held) - keep])
        self._held["stderr"] = held[len(held) - keep :]
        self._poke()

    def flush(self) -> None:
        """Release what was held back while looking for a mark (the interpreter is gone)."""
        for stream in ("stdout", "stderr"):
            self._emit(stream, self._held[stream])
            self._held[stream] = b""

    def host_refused(self, host: str, why: str = "") -> None:
        """A host the interpreter tried and was refused: the current cell's."""
        if self.collector is not None:
            self.collector.host_refused(host, why)


def check_cells(session: SessionRuntime, language: str) -> None:
    """MAIN-SANDBOX-0001 unless the session's driver declares cells, in ``language``."""
    lifecycle = session.lifecycle
    capabilities = lifecycle.capabilities()
    if not capabilities.cells:
        raise SandboxError(
            errors.INVALID_OPTION,
            f"the {lifecycle.driver_id!r} driver does not declare cells (Capabilities.cells); "
            "run code with session.run(...) or sandbox.run(...) there",
        )
    if language not in capabilities.cells_languages:
        declared = ", ".join(sorted(capabilities.cells_languages)) or "no language"
        raise arguments.invalid(
            "language",
            f"the {lifecycle.driver_id!r} driver runs cells in {declared}, not {language} "
            "(Capabilities.cells_languages); run that code as a program with session.run(...) there",
        )


def refuse_cell(session: SessionRuntime, code: object, language: object) -> None:
    """Refuse, as the session's next cell, one ``session.run_code`` can give no interpreter: its language is no
    cell language, or none the driver's cells run (MAIN-SANDBOX-0001, audited as refused). Returns otherwise,
    and nothing is opened for a refused one."""
    try:
        check_cells(session, languages.cell_language(language))
    except SandboxError as exc:
        refusal = exc
    else:
        return
    session.cells += 1
    event = session.opened.event(
        f"cell_{token.token_hex(8)}",
        "cell",
        cell=session.cells,
        language=language if isinstance(language, str) else None,
        code_sha256=code_sha256(code) if isinstance(code, str) else None,
    )

    def refuse() -> None:
        raise refusal

    session.lifecycle.plan(event, refuse)


class Kernel:
    """One interpreter's kernel in a session's box: started on its first cell, restarted after it died.

    ``language`` is its executor's, ``cwd`` the folder it runs in (None: the session's work folder), ``id`` what
    its cells' audit events name. ``session.interpreter`` (``mainsdk.interpreters``) is the app's handle on it.
    """

    def __init__(self, session: SessionRuntime, language: str, cwd: str | None, ident: str) -> None:
        self._session = session
        self.language = language
        self.cwd = cwd  # the interpreter's folder in the box; None: the exec's own
        self.site: tuple[str, ...] = ()  # in-box folders of the kernel's own packages, after the user's
        self.id = ident
        self.closed = False  # ``close``: it runs no more cells
        self._task: asyncio.Task[ExecOutcome] | None = None
        self._stream: _KernelStream | None = None
        self._input: InputStream | None = None
        self._sent = 0  # cells sent to the current kernel
        self._started_before = False
        self._lock = asyncio.Lock()
        # Every secret value a cell of this interpreter was given (``run_code(env=...)``): a thread or a background
        # job that cell left can print it in any later cell, so each is redacted for the interpreter's whole life.
        self._given: dict[bytes, None] = {}
        self._cell: object | None = None  # the running cell's marker, in ``_CALLBACK_OF`` for its callbacks

    @property
    def alive(self) -> bool:
        """Whether a kernel is running."""
        return self._task is not None and not self._task.done()

    async def _start(self) -> None:
        session = self._session
        # The kernel's own packages (IPython), where the driver put them in the box: the start line's ``site``.
        site = await session.lifecycle.kernel_site(session.opened.box, self.language)
        self.site = (site,) if site else ()
        secret = token.token_hex(16)
        # A frame's JSON escapes at most 6 characters per one of a result's (a base64 PNG: none).
        self._stream = _KernelStream(
            f"{MARK}{secret}:".encode(),
            f"{MARK}{secret}:end\n".encode(),
            8 * session.opened.plan.limits.files + (2 << 20),
        )
        # The token and the kernel's package go on stdin, not argv: neither shows in the box's /proc/<pid>/cmdline,
        # and only the app writes there. The same stdin then stays open for the cells (``Command.input``).
        self._input = InputStream()
        # The start line: which interpreter the kernel runs, in which folder, with which packages of its own.
        start = {"language": self.language, "cwd": self.cwd, "site": list(self.site)}
        program, args, stdin = kernel_command(secret, start)
        command = Command(
            program,
            args,
            stdin=stdin,
            timeout=MAX_TIMEOUT,
            env=session.opened.plan.env,
            input=self._input,
        )
        # The kernel outlives each cell: its limits per cell are kept here (the cell's timeout, its output).
        self._task = asyncio.ensure_future(session.lifecycle.exec_unlimited(session.opened.box, command, self._stream))
        self._sent = 0
        self._started_before = True

    async def kill(self) -> None:
        """End the kernel (the driver kills its whole process tree); its state is gone."""
        task, self._task = self._task, None
        if self._input is not None:
            self._input.close()
            self._input = None
        if task is None:
            return
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task

    async def restart(self) -> None:
        """End the kernel once no cell runs in it (a running cell ends first); the next cell starts an empty one."""
        self.refuse_own_callback("restart")
        async with self._lock:
            self._refuse_closed()
            await self.kill()
            self._started_before = False  # asked for: the next cell's result does not say ``restarted``

    async def close(self) -> None:
        """End the kernel now (a running cell raises MAIN-SANDBOX-0008) and run no more cells. Twice is fine."""
        self.closed = True
        await self.kill()

    def _refuse_closed(self) -> None:
        self._session.check_open()
        if self.closed:
            raise SandboxError(
                errors.NO_SESSION,
                f"no open interpreter {self.id!r} in sandbox session {self._session.id!r}: it was closed; "
                "open another with session.interpreter(...)",
                status=404,
            )

    async def run(
        self,
        code: object,
        language: object,
        timeout: object,
        callbacks: CellCallbacks,
        *,
        blocking: bool = False,
        env: Mapping[str, str | SecretRef] | None = None,
    ) -> CellResult:
        """Run one cell; see ``AsyncSession.run_code``. ``blocking``: for the synchronous API, whose callbacks are
        plain functions (an ``async def`` there is refused: nothing of the app's awaits on that loop). ``env``: the
        cell's own variables over the session's, for this cell only (checked as a run's env)."""
        self.refuse_own_callback("run_code")
        async with self._lock:
            marker = self._cell = object()
            try:
                return await self._run(code, language, timeout, callbacks, blocking, env, marker)
            finally:
                self._cell = None

    def refuse_own_callback(self, call: str) -> None:
        """MAIN-SANDBOX-0001 when awaited from a callback of this interpreter's running cell: the call would wait
        for that cell, which waits for the callback (the synchronous twin refuses such a call the same way)."""
        if self._cell is not None and _CALLBACK_OF.get() is self._cell:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"{call} on interpreter {self.id!r} was awaited from on_output, on_result or on_error of that "
                "interpreter's own running cell, which would deadlock (the cell waits for its callbacks); call it "
                "after run_code returns, or use another interpreter (session.interpreter(...))",
                ran=False,
            )

    async def _run(
        self,
        code: object,
        language: object,
        timeout: object,
        callbacks: CellCallbacks,
        blocking: bool,
        env: Mapping[str, str | SecretRef] | None,
        marker: object,
    ) -> CellResult:
        session = self._session
        lifecycle = session.lifecycle
        session.cells += 1
        number = session.cells
        cell_id = f"cell_{token.token_hex(8)}"
        event = session.opened.event(
            cell_id,
            "cell",
            cell=number,
            interpreter=self.id,
            language=language if isinstance(language, str) else None,
            code_sha256=code_sha256(code) if isinstance(code, str) else None,
        )

        def plan() -> tuple[_Listeners, str, CommandPlan, tuple[dict[str, str], tuple[bytes, ...]]]:
            listeners = _Listeners(callbacks, blocking, marker)
            checked_language = languages.cell_language(language)
            if checked_language != self.language:
                raise arguments.invalid(
                    "language",
                    f"interpreter {self.id!r} runs {self.language}, not {checked_language}; open one for "
                    f"{checked_language} with session.interpreter(language={checked_language!r})",
                )
            checked_code = arguments.code(code)
            if not self.alive:  # before an interpreter starts (``run_code`` checks every cell's language too)
                check_cells(session, checked_language)
            cell_env = lifecycle.cell_env(env)  # 0009 for a secret not under sandbox.secrets: nothing runs
            self._refuse_closed()
            command_plan = lifecycle.plan_command(session.opened, "python3", (), timeout, session.cost)
            return listeners, checked_code, command_plan, cell_env

        listeners, checked_code, command_plan, cell_env = lifecycle.plan(event, plan)
        try:
            async with session.use():
                result = await self._exchange(
                    cell_id,
                    number,
                    checked_code,
                    command_plan.command.timeout,
                    command_plan.cost_bound,
                    listeners,
                    cell_env,
                )
                session.cost += result.cost
                if result.error is not None:
                    listeners.call("on_error", result.error)
                await listeners.drain()  # the session is in use until the app's last callback is done
        except BaseException as exc:
            listeners.abandon()
            lifecycle.audit_failed(event, exc)
            raise
        if listeners.error is not None:
            # The app's own listener raised: the cell ran to its end, so this is the listener's error, with
            # ran=True (never a retryable outage: a retry runs it twice).
            error = listeners.error
            with contextlib.suppress(AttributeError):
                error.ran = True  # type: ignore[attr-defined]
            kept = "kept its state" if result.state_kept else "did not keep its state"
            error.add_note(
                f"raised by {listeners.raised_by} of cell {number}, which ran to its end; the interpreter {kept}"
            )
            lifecycle.audit_failed(event, error, started=time.monotonic() - result.duration)
            raise error
        lifecycle.audit_ended(
            event,
            Ended(
                stop=result.stop,
                exit_code=None,
                signal=None,
                duration=result.duration,
                cost=result.cost,
                hosts_refused=result.hosts_refused,
                hosts_refused_dropped=result.hosts_refused_dropped,
            ),
        )
        return result

    async def _exchange(
        self,
        cell_id: str,
        number: int,
        code: str,
        limit: float,
        cost_bound: bool,
        listeners: _Listeners,
        cell_env: tuple[dict[str, str], tuple[bytes, ...]],
    ) -> CellResult:
        session = self._session
        plan = session.opened.plan
        env, cell_secrets = cell_env
        self._given.update(dict.fromkeys(cell_secrets))
        secret_values = (*plan.secret_values, *self._given)
        lines = _OutputLines(listeners.output) if listeners.has_output else None
        on_output: Listener | None = lines.feed if lines is not None else None
        restarted = False
        if not self.alive:
            restarted = self._started_before
            await self.kill()
            await self._start()
        assert self._task is not None and self._stream is not None
        stream = self._stream
        task = self._task
        collector = OutputCollector(plan.limits.output, secret_values, on_output, label=cell_id)
        redact = collector.redact_name  # the same secrets: one redactor for the output, results and errors
        shown: dict[tuple[int, str], RichResult] = {}  # what came live, by (display, mime): each result once
        # Results are the box's words: at most limits.files bytes of them in all (the kernel's own bound on a
        # cell's results), each counted with some overhead, so a cell spamming displays cannot fill the app; the
        # live ones and those only the end frame lists share this one room.
        room = [plan.limits.files]

        def on_display(live: dict[str, Any]) -> None:
            items = live.get("results")
            for index, item in enumerate(items if isinstance(items, list) else ()):
                key = _display_key(item)
                if key is None or key in shown:
                    continue
                if not _take_room(room, item):
                    return
                rich = self._rich(item, number, len(shown) + index, redact)
                if rich is not None:
                    shown[key] = rich
                    listeners.call("on_result", rich)

        stream.begin(collector)
        stream.on_display = on_display
        self._sent += 1
        request: dict[str, Any] = {"code": code, "timeout": limit, "grace": GRACE, "max_results": plan.limits.files}
        if env:
            request["env"] = env
        if all(host_covered(host, plan.hosts) for host in PACKAGE_INDEX):
            request["pip_index"] = True  # only then: a request without it reads as before
        started = time.monotonic()
        try:
            assert self._input is not None
            # One line (JSON escapes every newline); the kernel takes requests from this stdin only.
            self._input.send(json.dumps(request).encode() + b"\n")
            try:
                ended = lambda: stream.frame_ready or collector.cut or stream.frame_too_large  # noqa: E731
                await stream.until(ended, task, limit + GRACE + BACKSTOP)
                if stream.frame_ready and not stream.err_ready:
                    # The frame is out; its stderr mark follows right behind it.
                    await stream.until(lambda: stream.err_ready, task, BACKSTOP)
            except asyncio.CancelledError:
                # The caller gave up on this cell while it runs: its end frame would answer the next cell, so the
                # interpreter goes with it (the next cell starts a new one).
                await self.kill()
                raise
            outcome = await self._settle(task, collector, stream)
        finally:
            stream.end()
            stream.on_display = None
        frame = outcome[2]
        if frame is not None and (frame.get("code_sha256"), frame.get("cell")) != (code_sha256(code), self._sent):
            # The kernel answered for other code than this cell's, or for another of its cells: no result of this.
            await self.kill()
            raise SandboxError(
                errors.DRIVER_UNAVAILABLE,
                f"cell {number}: the interpreter's answer is not for this cell (the SHA-256 of the code it ran, or "
                "its cell number, is not this cell's); the channel to it was tampered with, so no result is "
                "returned and the interpreter was ended (the next cell starts a new one)",
                ran=None,
                retryable=False,
            )
        if frame is not None and frame.get("not_run") is True:
            # The supervisor never sent the code: what an earlier cell left held the interpreter (kernel docstring).
            await self.kill()
            raise SandboxError(
                errors.DRIVER_UNAVAILABLE,
                f"cell {number}: the interpreter was not waiting for a cell (code an earlier cell left, a signal "
                "handler, a trap, a callback or a thread, holds it or took the cell in its place), so this cell's "
                "code was not run; the interpreter was ended and the next cell starts a new one",
                ran=False,
                retryable=False,
            )
        # Measured here, never taken from the frame: the cost is charged on it, and the cell could forge a frame.
        duration = time.monotonic() - started
        ending, error, frame, state_kept = outcome
        stop = stop_reason(attrs.evolve(ending, cost_bound=cost_bound))
        stdout, stderr = collector.finish()
        if lines is not None:
            lines.flush()  # the last line's end, when the cell left it without one
        results, dropped = self._results(frame, number, redact, shown, room)
        for rich in results:
            if not any(rich is seen for seen in shown.values()):
                listeners.call("on_result", rich)  # not sent live (a kernel that sends no display frames)
        if frame is not None and isinstance(frame.get("error"), dict):
            error = _cell_error(frame["error"], redact)
        return CellResult(
            id=cell_id,
            session_id=session.id,
            number=number,
            stdout=stdout,
            stderr=stderr,
            results=results,
            error=error,
            stop=stop,
            state_kept=state_kept,
            restarted=restarted,
            duration=duration,
            cost=cost_of(plan.price, duration),
            results_dropped=dropped,
            hosts_refused=tuple(collector.hosts_refused),
            hosts_refused_dropped=collector.hosts_refused_dropped,
        )

    async def _settle(
        self, task: asyncio.Task[ExecOutcome], collector: OutputCollector, stream: _KernelStream
    ) -> tuple[Ending, CellError | None, dict[str, Any] | None, bool]:
        """How the cell ended: (the facts of its end, error when the interpreter died, the kernel's frame, state kept).

        ``mainsdk.lifecycle.stop_reason`` turns the facts into the stop, as for a run or a session command.
        """
        if self._task is not task:
            # The session (or this interpreter) closed while the cell ran, and took the kernel with it.
            closed = f"sandbox session {self._session.id!r}" if self._session.closed else f"interpreter {self.id!r}"
            raise SandboxError(errors.NO_SESSION, f"{closed} was closed while the cell ran", status=404)
        if collector.cut or stream.frame_too_large:
            await self.kill()
            return Ending(output_cut=True), None, None, False
        if stream.frame_ready and not task.done():
            frame = _parse_frame(stream.frames[-1])
            if frame is None:
                await self.kill()
                error = CellError("KernelError", "the interpreter answered with a malformed frame", "")
                return Ending(), error, None, False
            # The kernel interrupted the cell at its time limit, or past its bound of display frames, and kept its
            # state.
            stop = frame.get("stop")
            return Ending(output_cut=stop == "output", timed_out=stop == "timeout"), None, frame, True
        if not task.done():
            # Neither an answer nor an exit past the timeout and its grace: the interpreter is stuck.
            await self.kill()
            stream.flush()
            return Ending(timed_out=True), None, None, False
        # The interpreter ended during the cell: a kill at a limit, a crash, os._exit.
        self._task = None
        stream.flush()
        outcome = task.result()  # a driver failure is raised here, as a session command's would be
        if outcome.stop is not None:
            return Ending(driver_stop=outcome.stop), None, None, False
        exit_code, signal = signal_status(outcome.exit_code, outcome.signal, None)
        if exit_code == WATCHDOG_EXIT:
            return Ending(timed_out=True), None, None, False
        how = f"died of {signal}" if signal else f"exited with status {exit_code}"
        if exit_code == UNSUPPORTED_EXIT:
            # The kernel's own "cannot start here" (its reason on stderr): with a folder, most likely that folder.
            how += " (the kernel could not start; its reason is on stderr)"
            if self.cwd is not None:
                how += f"; check that its folder {self.cwd!r} exists in the box, or open one with another cwd"
        error = CellError("InterpreterExited", f"the interpreter {how}; the next cell starts a new one", "")
        return Ending(), error, None, False

    def _results(
        self,
        frame: dict[str, Any] | None,
        number: int,
        redact: NameRedactor,
        shown: dict[tuple[int, str], RichResult],
        room: list[int],
    ) -> tuple[tuple[RichResult, ...], int]:
        if frame is None:
            return (), 0
        items = frame.get("results")
        dropped = frame.get("results_dropped")
        dropped = dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0
        out: list[RichResult] = []
        for index, item in enumerate(items if isinstance(items, list) else ()):
            key = _display_key(item)
            result = shown.get(key) if key is not None else None  # the one that came live, never kept twice
            if result is None:
                # Not sent live: it takes its room now, as a live one did (what the room cannot hold is dropped).
                fits = _take_room(room, item)
                result = self._rich(item, number, len(shown) + index, redact) if fits else None
            if result is None:
                dropped += 1
            else:
                out.append(result)
        return tuple(out), dropped

    def _rich(self, item: object, number: int, index: int, redact: NameRedactor) -> RichResult | None:
        if not isinstance(item, dict):
            return None
        mime, text, encoding = item.get("mime"), item.get("data"), item.get("encoding")
        if not is_mime(mime) or not isinstance(text, str):
            return None
        assert isinstance(mime, str)
        display = item.get("display")
        display = display if isinstance(display, int) and not isinstance(display, bool) and display >= 0 else None
        main = item.get("main") is True
        data: str | bytes
        if encoding == "base64":
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                return None
            if not is_binary(mime):
                data = redact(data.decode("utf-8", "replace"))  # every text form is redacted, however it came
        elif is_binary(mime):
            return None  # a binary form must come base64
        else:
            data = redact(_valid_text(text))
        raw = data if isinstance(data, bytes) else data.encode()
        if len(raw) <= INLINE_LIMIT:
            return RichResult(mime, data, display=display, main=main)
        session = self._session
        extension = _EXTENSIONS.get(mime, "bin" if is_binary(mime) else "txt")
        ref = session.lifecycle.keep_file(session.tenant, f"cell-{number}-{index}.{extension}", raw)
        return None if ref is None else RichResult(mime, None, ref, display=display, main=main)


_SYNC_REFUSAL = (
    "the synchronous Sandbox calls its callbacks on its own thread and cannot await them; pass a plain function, "
    "or use async_sandbox (AsyncSandbox), which awaits an async callback before run_code returns"
)


class _Listeners:
    """A cell's callbacks, checked, called as their events come, never raising into the stream (a listener that
    raises must not end the interpreter).

    What a callback returns that is awaitable (an ``async def``'s coroutine) is awaited by one task, in the order
    the events came, while the cell runs; ``drain`` waits for the last before ``run_code`` returns. The first
    exception of any callback, raised when called or awaited, is kept in ``error`` and then none is called more.
    """

    def __init__(self, callbacks: CellCallbacks, blocking: bool, marker: object = None) -> None:
        self._marker = marker  # the cell's, in ``_CALLBACK_OF`` while its callbacks are awaited
        why = _SYNC_REFUSAL if blocking else ""
        self._functions: dict[str, Callable[..., object] | None] = {
            "on_output": arguments.callback(
                callbacks.on_output, "on_output", ("stdout", b""), "(stream, data)", awaitable=not blocking, refused=why
            ),
            "on_result": arguments.callback(
                callbacks.on_result, "on_result", (None,), "(result)", awaitable=not blocking, refused=why
            ),
            "on_error": arguments.callback(
                callbacks.on_error, "on_error", (None,), "(error)", awaitable=not blocking, refused=why
            ),
        }
        self.error: Exception | None = None
        self.raised_by = ""
        self._closed = False  # the cell failed: nothing more is called or awaited
        self._pending: collections.deque[tuple[str, Awaitable[object]]] = collections.deque()
        self._worker: asyncio.Task[None] | None = None
        self._handed = False  # an awaitable came on a driver's own thread (the loop queues it)
        self._loop = asyncio.get_running_loop()

    @property
    def has_output(self) -> bool:
        """Whether there is an ``on_output``."""
        return self._functions["on_output"] is not None

    def output(self, stream: str, data: bytes) -> None:
        """A chunk of the cell's output, redacted (the collector's listener)."""
        self.call("on_output", stream, data)

    def call(self, name: str, *args: object) -> None:
        """Call the callback ``name``; queue what it returns when that is awaitable."""
        function = self._functions[name]
        if function is None or self.error is not None or self._closed:
            return
        try:
            returned = function(*args)
        except Exception as exc:  # noqa: BLE001 - the app's own: raised once the cell is over
            self._failed(name, exc)
            return
        if inspect.isawaitable(returned):
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                self._queue(name, returned)
            else:  # fed on a driver's own thread: the awaiting is the loop's
                self._handed = True
                self._loop.call_soon_threadsafe(self._queue, name, returned)

    def _queue(self, name: str, awaitable: Awaitable[object]) -> None:
        if self.error is not None or self._closed:
            _discard(awaitable)
            return
        self._pending.append((name, awaitable))
        if self._worker is None or self._worker.done():
            self._worker = self._loop.create_task(self._work())

    async def _work(self) -> None:
        _CALLBACK_OF.set(self._marker)  # this task's own context: what the callbacks await (and start) sees it
        while self._pending and self.error is None and not self._closed:
            name, awaitable = self._pending.popleft()
            try:
                await awaitable
            except Exception as exc:  # noqa: BLE001 - the app's own: raised once the cell is over
                self._failed(name, exc)

    def _failed(self, name: str, exc: Exception) -> None:
        if self.error is None:
            self.error, self.raised_by = exc, name
        while self._pending:
            _discard(self._pending.popleft()[1])

    async def drain(self) -> None:
        """Wait until every queued awaitable was awaited (or one raised)."""
        if self._handed or self._worker is not None:  # else nothing was queued: no turn of the loop to wait
            await asyncio.sleep(0)  # what a driver's thread handed the loop is queued by now
        while self._worker is not None and not self._worker.done():
            await self._worker
            await asyncio.sleep(0)

    def abandon(self) -> None:
        """The cell failed or was cancelled: nothing queued is awaited, and nothing is left unawaited."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
        while self._pending:
            _discard(self._pending.popleft()[1])


# The cell whose callback is being awaited (its interpreter's marker): ``Kernel.refuse_own_callback`` reads it.
_CALLBACK_OF: contextvars.ContextVar[object | None] = contextvars.ContextVar("mainsdk_cell_callback", default=None)


def _take_room(room: list[int], item: object) -> bool:
    """Whether one result item fits in what is left of the cell's results room (then taken); once one does
    not, none does (the room is spent: the order of the results is kept)."""
    data = item.get("data") if isinstance(item, dict) else None
    cost = (len(data) if isinstance(data, str) else 0) + LIVE_OVERHEAD
    if cost > room[0]:
        room[0] = 0
        return False
    room[0] -= cost
    return True


_SURROGATE = re.compile("[\ud800-\udfff]")


def _valid_text(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate (JSON's ``\\ud800`` alone) becomes U+FFFD, as invalid UTF-8
    output does; the box chose it, and nothing past here could encode it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def _discard(awaitable: Awaitable[object]) -> None:
    """Close a coroutine that will not be awaited (no "never awaited" warning), or cancel a future."""
    if inspect.iscoroutine(awaitable):
        awaitable.close()
    elif isinstance(awaitable, asyncio.Future):
        awaitable.cancel()


def _mark_start(data: bytes, mark: bytes) -> int:
    """How many bytes at the end of ``data`` could be the start of ``mark``: held back until the next chunk tells.

    Only those: the rest of a chunk goes to the app at once (a short ``print`` is seen while the cell runs).
    """
    at = data.find(mark[:1], max(0, len(data) - len(mark) + 1))
    while at >= 0:
        if mark.startswith(data[at:]):
            return len(data) - at
        at = data.find(mark[:1], at + 1)
    return 0


def _display_key(item: object) -> tuple[int, str] | None:
    """A result item's (display index, MIME type): what makes it one form of one output; None without an index."""
    if not isinstance(item, dict):
        return None
    display, mime = item.get("display"), item.get("mime")
    if isinstance(display, int) and not isinstance(display, bool) and isinstance(mime, str):
        return display, mime
    return None


def _parse_frame(raw: bytes) -> dict[str, Any] | None:
    try:
        frame = json.loads(raw)
    except (ValueError, RecursionError):  # a box's JSON nested past the parser's depth is malformed too
        return None
    return frame if isinstance(frame, dict) else None


def _cell_error(data: dict[str, Any], redact: NameRedactor) -> CellError:
    def text(key: str) -> str:
        value = data.get(key)
        return redact(_valid_text(value[:TEXT_LIMIT])) if isinstance(value, str) else ""

    return CellError(text("name"), text("value"), text("traceback"))
