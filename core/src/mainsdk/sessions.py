"""Sessions: one box kept open across commands, for the tenant that created it.

A session runs programs with an argument list, never through a shell. It
closes after ``idle`` seconds without a call, on ``close()``, or when the app
exits, and its box goes with it. Its cost accumulates; a command that would
pass the ceiling is cut short and stops with ``cost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets as token
import time
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs

from mainsdk import arguments, checkpoints, errors, languages
from mainsdk.audit import AuditEvent
from mainsdk.background import AsyncProcess
from mainsdk.cells import (
    CellCallbacks,
    CellResult,
    ErrorCallback,
    OutputCallback,
    ResultCallback,
    refuse_cell,
)
from mainsdk.checkpoints import SessionOptions, Snapshot, SnapshotRecord, Snapshots
from mainsdk.driver import Folder, NetworkPolicy, box_path
from mainsdk.errors import SandboxError
from mainsdk.files import FileRef
from mainsdk.interpreters import AsyncInterpreter, Interpreters, run_in
from mainsdk.lifecycle import Lifecycle, OpenBox
from mainsdk.limits import Listener
from mainsdk.plugins import DriverHookError
from mainsdk.secrets import SecretRef
from mainsdk.session_runtime import CommandResult, SessionRuntime, no_session, paused_session

DEFAULT_IDLE = 300.0
MAX_BACKGROUND = 16  # background processes running at once in one session


def _path_taken(path: str, cause: BaseException | None) -> SandboxError | None:
    """MAIN-SANDBOX-0001 for a write the box's own files make impossible, or None for any other failure.

    A driver reports the path as the kernel does (``NotADirectoryError``: a folder on the way is a file;
    ``IsADirectoryError``: the path is a folder) and writes nothing. That is the caller's mistake, which a
    retry repeats: not an outage (``MAIN-SANDBOX-0006``).
    """
    if isinstance(cause, NotADirectoryError):
        why = "a folder on its way is a file in the session's box"
    elif isinstance(cause, IsADirectoryError):
        why = "it is a folder in the session's box, which a file cannot replace"
    else:
        return None
    return arguments.invalid("path", f"{path!r} cannot be written: {why}; write another path, or remove that first")


@attrs.frozen
class CheckpointContext:
    """What a session's checkpoints need of its sandbox: its snapshots, how it opens a fork, what idle does.

    ``open_fork(options, snapshot_id, source_session)`` opens a session of the current tenant from a snapshot,
    planned from ``options`` again (secrets resolved anew). ``on_idle``: ``sandbox.on-idle`` of main.yaml.
    """

    snapshots: Snapshots
    open_fork: Callable[[SessionOptions, str, str], Awaitable[AsyncSession]]
    on_idle: str = "close"


@arguments.checked_calls("session")
class AsyncSession:
    """An open box. Use it as ``async with``; it closes on exit."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        opened: OpenBox,
        idle: float,
        *,
        ended: Callable[[str], None],
        detached: bool = False,
        checkpoints: CheckpointContext | None = None,
        options: SessionOptions | None = None,
        restarted: bool = False,
        paused: bool = False,
    ) -> None:
        self.id = opened.session_id
        self.tenant = opened.tenant
        self.feature = opened.feature
        self._runtime = SessionRuntime(lifecycle, opened, close=self.close)
        self._runtime.paused = paused  # a reconnected box another process paused
        self._idle = idle
        self._ended = ended  # tells the sandbox this session is over, so it is never looked up again
        # Reconnected from another process (``sandbox.get``): going idle here only lets go of it, since the
        # opener (or another worker) may still be using it; ``close()`` still stops it.
        self._detached = detached
        self._interpreters = Interpreters(self._runtime)
        if restarted:
            # Started from a filesystem snapshot (a fork): its interpreters start empty, and the first cell says so.
            self._interpreters.mark_restarted()
        self._checkpoints = checkpoints
        self._options = options  # None for a reconnected session: what its opener passed stays with the opener
        self._processes: list[AsyncProcess] = []
        self._watchdog = asyncio.get_running_loop().create_task(self._close_when_idle())

    @property
    def network_policy(self) -> NetworkPolicy:
        """The egress policy the box was started with (``mainsdk_network_policy``), on each command's audit event."""
        return self._runtime.opened.network_policy

    @property
    def cost(self) -> Decimal:
        """What the session's commands, cells and background processes have cost so far."""
        return self._runtime.cost

    @property
    def closed(self) -> bool:
        """Whether the session is closed (by ``close``, idle expiry or the app's exit)."""
        return self._runtime.closed

    @property
    def paused(self) -> bool:
        """Whether the session is paused (``pause``; ``sandbox.resume(id)`` lets it run again)."""
        return self._runtime.paused

    async def _close_when_idle(self) -> None:
        runtime = self._runtime
        while not runtime.closed:
            if runtime.paused:  # a paused session is not idle: it waits for resume or close
                await asyncio.sleep(0.5)
                continue
            remaining = runtime.last_used + self._idle - time.monotonic()
            if remaining <= 0 and not runtime.busy:
                if self._pauses_when_idle():
                    try:
                        await self.pause()
                    except SandboxError:
                        await self.close()  # the pause failed (the box is gone): idle ends it, as it would have
                        return
                    continue
                if self._detached:
                    runtime.closed = True
                    self._ended(self.id)
                else:
                    await self.close()
                return
            await asyncio.sleep(max(remaining, 0.05))

    async def write(self, path: str, data: str | bytes) -> None:
        """Write a file into the session's work folder (a plain relative path; ``str`` or ``bytes``)."""
        checked = arguments.relative_path(path, "path")
        payload = arguments.file_data(data, "data")
        runtime = self._runtime
        if len(payload) > runtime.opened.plan.limits.files:
            raise SandboxError(errors.INVALID_OPTION, f"data: {len(payload)} bytes for {path!r} is above limits.files")
        async with runtime.use():
            try:
                await runtime.lifecycle.write_file(runtime.opened.box, Folder.WORK, checked, payload)
            except DriverHookError as exc:
                taken = _path_taken(checked, exc.__cause__)
                if taken is None:
                    raise
                raise taken from None

    async def read(self, path: str) -> bytes:
        """Read a file from the work folder, or from the out folder as ``../out/name``."""
        if not isinstance(path, str):
            raise arguments.invalid("path", f"must be a string, not {arguments.type_name(path)}")
        folder, within = box_path(path)
        checked = arguments.relative_path(within, "path")
        runtime = self._runtime
        async with runtime.use():
            return await runtime.lifecycle.read_file(runtime.opened.box, folder, checked)

    async def out_files(self) -> tuple[tuple[FileRef, ...], tuple[str, ...]]:
        """What the box's out folder holds now, as FileRefs of the session's tenant (path order), and the names of
        those not kept (past limits.files, not regular files). The folder is left as it is.
        """
        runtime = self._runtime
        plan = runtime.opened.plan
        async with runtime.use():
            collected = await runtime.lifecycle.collect(runtime.opened.box, plan.limits.files)
        return runtime.lifecycle.keep_collected(self.tenant, collected, plan.secret_values)

    async def run(
        self, program: str, args: Sequence[str] = (), *, timeout: object = None, on_output: Listener | None = None
    ) -> CommandResult:
        """Run ``program`` with ``args`` in the session's box: one argument each, never a shell line.

        ``timeout`` lowers the session's time limit for this command. The
        session's cost so far counts: a command is cut short where it would
        pass ``max_cost`` and stops with ``cost``.
        """
        prepared = self._runtime.prepare(program, args, timeout, on_output)
        async with self._runtime.use():
            return await self._runtime.execute(prepared)

    def start(
        self, program: str, args: Sequence[str] = (), *, timeout: object = None, on_output: Listener | None = None
    ) -> AsyncProcess:
        """Start ``program`` with ``args`` in the background and return its handle at once.

        It runs under the session's limits like ``run`` (its own time limit, lowered by ``timeout``;
        the memory limit; output up to ``limits.output``, kept for ``output()``), is audited and
        costed when it ends, and dies with the session. At most 16 run at once in a session.
        """
        lifecycle = self._runtime.lifecycle

        def refuse() -> None:
            if not lifecycle.capabilities().background:
                raise SandboxError(
                    errors.INVALID_OPTION,
                    f"the {lifecycle.driver_id!r} driver does not declare background processes "
                    "(Capabilities.background); run the program with session.run(...) there",
                )
            if len([p for p in self._processes if p.running]) >= MAX_BACKGROUND:
                raise SandboxError(
                    errors.INVALID_OPTION,
                    f"session {self.id} already runs {MAX_BACKGROUND} background processes; wait for or kill one first",
                )

        process = AsyncProcess(self._runtime, program, args, timeout, on_output, refuse)
        self._processes = [*(p for p in self._processes if p.running), process]
        return process

    def interpreter(
        self, language: str = "python", *, cwd: str | None = None, name: str | None = None
    ) -> AsyncInterpreter:
        """Open another interpreter in the session's box, with its own state: E2B's ``create_code_context``.

        ``language``: one the driver's cells run (``Capabilities.cells_languages``: ``python`` on every driver
        with cells; ``javascript``, ``typescript``, ``bash`` where declared). ``cwd``: the folder its cells run
        in, relative to the session's work folder or absolute (None: the work folder). ``name``: a label of
        yours, unique among the session's open interpreters. A bad argument, or a language the driver does not
        run, is MAIN-SANDBOX-0001 here and nothing starts; the interpreter itself starts in the box with its
        first cell. See ``mainsdk.interpreters.AsyncInterpreter`` for its calls (``run_code``, ``restart``,
        ``close``); closing the session closes it.
        """
        return self._interpreters.open(language, cwd, name)

    def interpreters(self) -> list[AsyncInterpreter]:
        """The session's open interpreters, in the order they were opened: those ``interpreter()`` opened and
        the default ones ``run_code`` opened (``default`` True)."""
        return self._interpreters.listed()

    async def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        timeout: object = None,
        on_output: OutputCallback | None = None,
        on_result: ResultCallback | None = None,
        on_error: ErrorCallback | None = None,
        env: Mapping[str, str | SecretRef] | None = None,
    ) -> CellResult:
        """Run ``code`` as a cell in the session's default interpreter of ``language``: variables, imports and open
        files stay.

        That interpreter starts with the language's first cell and lives as long as the session (other
        interpreters: ``session.interpreter(...)``). ``timeout``
        lowers the session's time limit for this cell: at it the cell gets ``KeyboardInterrupt``
        (the state is kept), and a cell that does not stop within a second more ends the
        interpreter (``state_kept`` False; the next cell starts an empty one, ``restarted`` True).
        See ``mainsdk.cells.CellResult`` for what comes back.

        Callbacks, each a plain function or an ``async def``: ``on_output(stream, data)`` each chunk of output as
        it comes (redacted); ``on_result(result)`` each of the cell's rich results (the ``RichResult`` objects its
        ``results`` holds) as each display output is made, while the cell runs; ``on_error(error)`` the cell's
        ``CellError``, once, when it has one. An async callback is awaited, in the order of the events, before
        ``run_code`` returns (an async ``on_output`` while the cell runs). A callback that raises is called no
        more, and its exception is raised once the cell is over (``ran`` True); the interpreter lives on. A
        callback must not run a cell in this session: the session waits for it.

        ``env``: variables for this cell only, over the session's (``os.environ`` in the interpreter and what its
        ``!cmd`` children inherit), restored after it; a value may be ``secret("NAME")`` for a secret listed under
        ``sandbox.secrets`` (otherwise MAIN-SANDBOX-0009 and nothing runs), and its value is redacted from the
        cell's output, results and error.
        """
        callbacks = CellCallbacks(on_output, on_result, on_error)
        return await run_cell(self, code, language, timeout, callbacks, env=env)

    def _pauses_when_idle(self) -> bool:
        context = self._checkpoints
        if self._detached or context is None or context.on_idle != "pause":
            return False
        return self._runtime.lifecycle.capabilities().pause

    def _checkpoint_event(self, event_id: str, kind: Any, **fields: Any) -> AuditEvent:
        return self._runtime.opened.event(event_id, kind, **fields)

    async def pause(self) -> None:
        """Pause the session: nothing runs in its box, and its files (and, where the driver keeps memory,
        ``Capabilities.pause_keeps_memory``, its interpreters' state) wait for ``sandbox.resume(session.id)``.

        A driver without pausing (``Capabilities.pause``) is MAIN-SANDBOX-0001 naming it; nothing happens.
        Pausing a paused session is a no-op. One audit event, ``pause``.
        """
        runtime = self._runtime
        if runtime.paused and not runtime.closed:
            return
        lifecycle = runtime.lifecycle
        event = self._checkpoint_event(f"pause_{token.token_hex(8)}", "pause")

        def plan() -> None:
            runtime.check_open()
            checkpoints.check_pause(lifecycle.capabilities(), lifecycle.driver_id)
            self._refuse_busy("paused")

        lifecycle.plan(event, plan)
        if not lifecycle.capabilities().pause_keeps_memory:
            await self._end_processes()  # their state cannot survive: the next cell says the interpreter restarted
        started = time.monotonic()
        try:
            async with runtime.use():
                await lifecycle.pause(runtime.opened.box)
        except BaseException as exc:
            lifecycle.audit_failed(event, exc, started)
            raise
        runtime.paused = True
        lifecycle.audit(attrs.evolve(event, duration=time.monotonic() - started))

    async def resume_paused(self, plan_again: Callable[[SessionOptions], Any] | None) -> None:
        """Let a paused session run again (``sandbox.resume``): the box first, then its secrets bound anew."""
        runtime = self._runtime
        if not runtime.paused:
            runtime.check_open()
            return
        lifecycle = runtime.lifecycle
        event = self._checkpoint_event(f"resume_{token.token_hex(8)}", "resume")
        fresh = None
        if plan_again is not None and self._options is not None:
            # Secrets from their names, now: a value rotated (or revoked) while the session slept is the new one.
            fresh = lifecycle.plan(event, lambda: plan_again(self._options_now()))
        started = time.monotonic()
        try:
            await lifecycle.resume(runtime.opened.box)
        except BaseException as exc:
            lifecycle.audit_failed(event, exc, started)
            raise
        if fresh is not None:
            runtime.opened.plan = fresh
        runtime.paused = False
        runtime.last_used = time.monotonic()
        lifecycle.audit(attrs.evolve(event, duration=time.monotonic() - started))

    def _options_now(self) -> SessionOptions:
        assert self._options is not None
        return self._options

    def _refuse_busy(self, what: str) -> None:
        if self._runtime.busy:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"session {self.id} has a call running; wait for it to end before it is {what}",
            )

    async def _end_processes(self) -> None:
        """End the interpreters (kept: each restarts on its next cell, which says so) and background processes."""
        await self._interpreters.kill_all()
        for process in self._processes:
            await process.kill()

    def _context(self) -> CheckpointContext:
        context = self._checkpoints
        if context is None or self._options is None:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"session {self.id} was reached from another process (sandbox.get); take snapshots and forks in "
                "the process that opened it",
            )
        return context

    async def _take(self, name: str | None, kind: object, *, hidden: bool, event: AuditEvent) -> SnapshotRecord:
        runtime = self._runtime
        lifecycle = runtime.lifecycle
        snapshot_id = f"snap_{token.token_hex(12)}"

        def plan() -> tuple[CheckpointContext, checkpoints.SnapshotKind]:
            runtime.check_open()
            checked = checkpoints.check_kind(lifecycle.capabilities(), lifecycle.driver_id, kind)
            context = self._context()
            context.snapshots.room()
            self._refuse_busy("checkpointed")
            return context, checked

        context, checked = lifecycle.plan(event, plan)
        started = time.monotonic()
        try:
            if checked == "filesystem":
                await self._end_processes()
            async with runtime.use():
                expires = await lifecycle.snapshot(runtime.opened.box, snapshot_id, checked)
        except BaseException as exc:
            lifecycle.audit_failed(attrs.evolve(event, snapshot_id=snapshot_id), exc, started)
            raise
        snapshot = checkpoints.made(snapshot_id, name, checked, self.id, expires)
        assert self._options is not None
        record = SnapshotRecord(snapshot, self.tenant, self._options.without_files(), hidden=hidden)
        context.snapshots.add(record)
        if not hidden:
            lifecycle.audit(attrs.evolve(event, snapshot_id=snapshot_id, duration=time.monotonic() - started))
        return record

    async def snapshot(self, name: str | None = None, *, kind: str = "filesystem") -> Snapshot:
        """Keep the box's state as a ``Snapshot`` of the session's tenant; the session goes on.

        ``kind``: "filesystem" (the files; the session's interpreters and background processes end, and each
        interpreter's next cell says ``restarted``) or "memory" where the driver offers it
        (``Capabilities.checkpoint_kinds``; another is MAIN-SANDBOX-0001 naming the driver and what it offers,
        and nothing happens). The snapshot holds no secret value: a session made from it
        (``sandbox.create(snapshot=...)``) binds its own. One audit event, ``snapshot``.
        """
        checked_name = arguments.optional_text(name, "name")
        event = self._checkpoint_event(f"snapshot_{token.token_hex(8)}", "snapshot")
        record = await self._take(checked_name, kind, hidden=False, event=event)
        return record.snapshot

    async def fork(self, count: int = 1) -> list[AsyncSession | SandboxError]:
        """``count`` (1 to 20) new sessions, each starting with this session's files as they are now.

        Each fork is its own session: its own box, limits, cost and audit event (``fork``), with the options this
        session was opened with and its secrets bound again from their names. Its interpreters start empty
        (its first cell says ``restarted``); so do this session's, which a filesystem checkpoint ends. One entry
        per fork, in order: the session, or the ``SandboxError`` that fork failed with, independent of the
        others. A driver without filesystem checkpoints is MAIN-SANDBOX-0001 naming it; nothing happens.
        """
        runtime = self._runtime
        lifecycle = runtime.lifecycle
        event = self._checkpoint_event(f"fork_{token.token_hex(8)}", "fork", source_session=self.id)
        lifecycle.plan(event, lambda: checkpoints.check_count(count))
        record = await self._take(None, "filesystem", hidden=True, event=event)
        context = self._context()
        forks: list[AsyncSession | SandboxError] = []
        try:
            for _ in range(count):
                try:
                    forks.append(await context.open_fork(record.options, record.snapshot.id, self.id))
                except SandboxError as exc:
                    forks.append(exc)
        finally:
            # The forks hold what they need of it; no one else ever saw its id.
            context.snapshots.pop(record.snapshot.id)
            with contextlib.suppress(SandboxError):  # its storage goes with the driver; the forks stand
                await lifecycle.delete_snapshot(record.snapshot.id)
        return forks

    async def close(self) -> None:
        """Close the session and remove everything its box held. Closing twice is fine."""
        if self._runtime.closed:
            return
        if self._runtime.paused:
            # A paused box is let run again first, so the driver can end its processes and remove it.
            self._runtime.paused = False
            with contextlib.suppress(SandboxError):  # it stops below all the same
                await self._runtime.lifecycle.resume(self._runtime.opened.box)
        self._runtime.closed = True
        self._ended(self.id)
        if self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        await asyncio.shield(self._stop_everything())

    async def _stop_everything(self) -> None:
        # The interpreters and background processes first (the driver kills each tree), then the box.
        await self._end_processes()
        await self._runtime.lifecycle.stop(self._runtime.opened.box)

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SessionOpener:
    """What ``AsyncSandbox.create`` returns: await it for the session, or use it as ``async with``."""

    def __init__(self, opening: Callable[[], Awaitable[AsyncSession]]) -> None:
        self._opening = opening
        self._session: AsyncSession | None = None

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._opening().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._opening()
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def __enter__(self) -> None:
        raise TypeError(
            "async_sandbox.create(...) is the asyncio API: use `async with async_sandbox.create(...) as session:` "
            "in async code, or the synchronous mainsdk.sandbox: `with sandbox.create(...) as session:`"
        )

    def __exit__(self, *exc: object) -> None:
        """Never reached: ``__enter__`` refuses."""


async def run_cell(
    session: AsyncSession,
    code: object,
    language: object,
    timeout: object,
    callbacks: CellCallbacks,
    *,
    blocking: bool = False,
    env: Mapping[str, str | SecretRef] | None = None,
) -> CellResult:
    """``session.run_code``, and the synchronous twin's with ``blocking`` (its callbacks must be plain functions)."""
    refuse_cell(session._runtime, code, language)  # a language no interpreter here runs: audited and raised
    interpreter = session._interpreters.default(languages.cell_language(language))  # "node" and "js": javascript's
    return await run_in(interpreter, code, timeout, callbacks, blocking=blocking, env=env)


def find_session(sessions: dict[str, AsyncSession], session_id: object, tenant: str) -> AsyncSession:
    """The open session ``session_id`` of ``tenant``, or MAIN-SANDBOX-0008 (also when it is paused)."""
    session = find_paused(sessions, session_id, tenant)
    if session.paused:
        raise paused_session(session.id)
    return session


def find_paused(sessions: dict[str, AsyncSession], session_id: object, tenant: str) -> AsyncSession:
    """The session ``session_id`` of ``tenant``, paused or not (``sandbox.resume``), or MAIN-SANDBOX-0008."""
    session = sessions.get(session_id) if isinstance(session_id, str) else None
    if session is None or session.closed or session.tenant != tenant:
        raise no_session(str(session_id))
    return session
