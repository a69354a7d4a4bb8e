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
from collections.abc import Awaitable, Callable, Generator, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs

from mainsdk import arguments, errors
from mainsdk.audit import AuditEvent
from mainsdk.driver import Folder, NetworkPolicy, StopReason, box_path
from mainsdk.errors import BoxGone, SandboxError
from mainsdk.files import FileRef
from mainsdk.lifecycle import CommandPlan, Lifecycle, OpenBox
from mainsdk.limits import Listener
from mainsdk.plugins import DriverHookError

if TYPE_CHECKING:
    from mainsdk.background import AsyncProcess
    from mainsdk.cells import CellResult, Interpreter

DEFAULT_IDLE = 300.0
MAX_BACKGROUND = 16  # background processes running at once in one session


@attrs.frozen
class _Prepared:
    """A session command that passed its checks, with the audit event it will complete."""

    id: str
    event: AuditEvent
    plan: CommandPlan
    on_output: Listener | None


@attrs.frozen
class CommandResult:
    """What one session command did. A stopped command has ``stop`` set; it is returned, not raised."""

    id: str
    session_id: str
    stdout: str
    stderr: str
    exit_code: int | None
    stop: StopReason | None
    duration: float
    cost: Decimal
    hosts_refused: tuple[str, ...] = ()  # redacted, at most 50
    hosts_refused_dropped: int = 0  # how many more were refused than ``hosts_refused`` lists
    signal: str | None = None  # the signal the command died of ("SIGSEGV"); exit_code is then 128 + its number
    # The exact output bytes, redacted and cut at the limit; ``stdout``/``stderr`` are them decoded (UTF-8, lossy).
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    @property
    def ok(self) -> bool:
        """Whether the command ran to a clean exit: not stopped, exit code 0."""
        return self.stop is None and self.exit_code == 0

    @property
    def stop_code(self) -> str | None:
        """The seed's code for the stop, or None."""
        return errors.STOP_CODES[self.stop] if self.stop else None


def _no_session(session_id: str) -> SandboxError:
    # The same words for unknown, closed, expired and another tenant's: nothing says the id exists elsewhere.
    return SandboxError(errors.NO_SESSION, f"no open sandbox session {session_id!r} in the current tenant", status=404)


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
    ) -> None:
        self.id = opened.session_id
        self.tenant = opened.tenant
        self.feature = opened.feature
        self.cost = Decimal(0)
        self._lifecycle = lifecycle
        self._opened = opened
        self._idle = idle
        self._ended = ended  # tells the sandbox this session is over, so it is never looked up again
        self._closed = False
        # Reconnected from another process (``sandbox.get``): going idle here only lets go of it, since the
        # opener (or another worker) may still be using it; ``close()`` still stops it.
        self._detached = detached
        self._busy = 0
        self._last_used = time.monotonic()
        self._interpreter: Interpreter | None = None
        self._processes: list[AsyncProcess] = []
        self._watchdog = asyncio.get_running_loop().create_task(self._close_when_idle())

    @property
    def network_policy(self) -> NetworkPolicy:
        """The egress policy the box was started with (``mainsdk_network_policy``), on each command's audit event."""
        return self._opened.network_policy

    @property
    def opened(self) -> OpenBox:
        """The session's open box and what every command in it is planned against (``mainsdk.lifecycle``)."""
        return self._opened

    @property
    def lifecycle(self) -> Lifecycle:
        """The box lifecycle its commands and cells go through."""
        return self._lifecycle

    @property
    def closed(self) -> bool:
        """Whether the session is closed (by ``close``, idle expiry or the app's exit)."""
        return self._closed

    async def _close_when_idle(self) -> None:
        while not self._closed:
            remaining = self._last_used + self._idle - time.monotonic()
            if remaining <= 0 and not self._busy:
                if self._detached:
                    self._closed = True
                    self._ended(self.id)
                else:
                    await self.close()
                return
            await asyncio.sleep(max(remaining, 0.05))

    @contextlib.asynccontextmanager
    async def _use(self) -> Any:
        if self._closed:
            raise _no_session(self.id)
        self._busy += 1
        try:
            yield
        except BoxGone as exc:
            # The driver knows the box is gone (its backend died): the session is over, not unavailable.
            await self.close()
            raise SandboxError(
                errors.NO_SESSION,
                f"sandbox session {self.id!r} is gone: {exc.message}; open a new session",
                status=404,
                ran=False,
            ) from None
        finally:
            self._busy -= 1
            self._last_used = time.monotonic()

    async def write(self, path: str, data: str | bytes) -> None:
        """Write a file into the session's work folder (a plain relative path; ``str`` or ``bytes``)."""
        checked = arguments.relative_path(path, "path")
        payload = arguments.file_data(data, "data")
        if len(payload) > self._opened.plan.limits.files:
            raise SandboxError(errors.INVALID_OPTION, f"data: {len(payload)} bytes for {path!r} is above limits.files")
        async with self._use():
            try:
                await self._lifecycle.write_file(self._opened.box, Folder.WORK, checked, payload)
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
        async with self._use():
            return await self._lifecycle.read_file(self._opened.box, folder, checked)

    async def out_files(self) -> tuple[tuple[FileRef, ...], tuple[str, ...]]:
        """What the box's out folder holds now, as FileRefs of the session's tenant (path order), and the names of
        those not kept (past limits.files, not regular files). The folder is left as it is.
        """
        plan = self._opened.plan
        async with self._use():
            collected = await self._lifecycle.collect(self._opened.box, plan.limits.files)
        return self._lifecycle.keep_collected(self.tenant, collected, plan.secret_values)

    async def run(
        self, program: str, args: Sequence[str] = (), *, timeout: object = None, on_output: Listener | None = None
    ) -> CommandResult:
        """Run ``program`` with ``args`` in the session's box: one argument each, never a shell line.

        ``timeout`` lowers the session's time limit for this command. The
        session's cost so far counts: a command is cut short where it would
        pass ``max_cost`` and stops with ``cost``.
        """
        prepared = self._prepare(program, args, timeout, on_output)
        async with self._use():
            return await self._execute(prepared)

    def _prepare(
        self,
        program: str,
        args: Sequence[str],
        timeout: object,
        on_output: Listener | None,
        refuse: Callable[[], None] | None = None,
    ) -> _Prepared:
        """A planned command and its audit event; a refusal is audited (by the lifecycle) and raised: nothing runs.

        ``refuse``: a check of the caller's own (a background process's), made inside the same plan.
        """
        command_id = f"cmd_{token.token_hex(8)}"
        event = self._opened.event(command_id, "command")

        def plan() -> tuple[Listener | None, CommandPlan]:
            listener = arguments.listener(on_output)
            self._check_open()
            if refuse is not None:
                refuse()
            return listener, self._lifecycle.plan_command(self._opened, program, args, timeout, self.cost)

        listener, command_plan = self._lifecycle.plan(event, plan)
        return _Prepared(command_id, event, command_plan, listener)

    async def _execute(self, prepared: _Prepared) -> CommandResult:
        """Run a prepared command to its end under the session's limits; audit it once and count its cost."""
        lifecycle, opened = self._lifecycle, self._opened
        plan = opened.plan
        try:
            executed = await lifecycle.execute(
                opened.box, prepared.plan.command, plan.limits.output, plan.secret_values, prepared.on_output
            )
        except BaseException as exc:
            lifecycle.audit_failed(prepared.event, exc)
            raise
        ended = lifecycle.ended(executed, plan.price, executed.ending(cost_bound=prepared.plan.cost_bound))
        self.cost += ended.cost
        lifecycle.audit_ended(prepared.event, ended)
        return CommandResult(
            id=prepared.id,
            session_id=self.id,
            stdout=executed.stdout,
            stderr=executed.stderr,
            stdout_bytes=executed.stdout_bytes,
            stderr_bytes=executed.stderr_bytes,
            exit_code=ended.exit_code,
            stop=ended.stop,
            duration=ended.duration,
            cost=ended.cost,
            hosts_refused=ended.hosts_refused,
            hosts_refused_dropped=ended.hosts_refused_dropped,
            signal=ended.signal,
        )

    def start(
        self, program: str, args: Sequence[str] = (), *, timeout: object = None, on_output: Listener | None = None
    ) -> AsyncProcess:
        """Start ``program`` with ``args`` in the background and return its handle at once.

        It runs under the session's limits like ``run`` (its own time limit, lowered by ``timeout``;
        the memory limit; output up to ``limits.output``, kept for ``output()``), is audited and
        costed when it ends, and dies with the session. At most 16 run at once in a session.
        """
        from mainsdk.background import AsyncProcess

        def refuse() -> None:
            if not self._lifecycle.capabilities().background:
                raise SandboxError(
                    errors.INVALID_OPTION,
                    f"the {self._lifecycle.driver_id!r} driver does not declare background processes "
                    "(Capabilities.background); run the program with session.run(...) there",
                )
            if len([p for p in self._processes if p.running]) >= MAX_BACKGROUND:
                raise SandboxError(
                    errors.INVALID_OPTION,
                    f"session {self.id} already runs {MAX_BACKGROUND} background processes; wait for or kill one first",
                )

        process = AsyncProcess(self, program, args, timeout, on_output, refuse)
        self._processes = [*(p for p in self._processes if p.running), process]
        return process

    async def run_code(
        self, code: str, language: str = "python", *, timeout: object = None, on_output: Listener | None = None
    ) -> CellResult:
        """Run ``code`` as a cell in the session's interpreter: variables, imports and open files stay.

        The interpreter starts with the first cell and lives as long as the session. ``timeout``
        lowers the session's time limit for this cell: at it the cell gets ``KeyboardInterrupt``
        (the state is kept), and a cell that does not stop within a second more ends the
        interpreter (``state_kept`` False; the next cell starts an empty one, ``restarted`` True).
        See ``mainsdk.cells.CellResult`` for what comes back.
        """
        from mainsdk.cells import Interpreter

        if self._interpreter is None:
            self._interpreter = Interpreter(self)
        return await self._interpreter.run(code, language, timeout, on_output)

    def _check_open(self) -> None:
        """A closed session runs nothing: ``MAIN-SANDBOX-0008``."""
        if self._closed:
            raise _no_session(self.id)

    async def close(self) -> None:
        """Close the session and remove everything its box held. Closing twice is fine."""
        if self._closed:
            return
        self._closed = True
        self._ended(self.id)
        if self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        await asyncio.shield(self._stop_everything())

    async def _stop_everything(self) -> None:
        # The interpreter and background processes first (the driver kills each tree), then the box.
        if self._interpreter is not None:
            await self._interpreter.kill()
        for process in self._processes:
            await process.kill()
        await self._lifecycle.stop(self._opened.box)

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


def find_session(sessions: dict[str, AsyncSession], session_id: object, tenant: str) -> AsyncSession:
    """The open session ``session_id`` of ``tenant``, or MAIN-SANDBOX-0008."""
    session = sessions.get(session_id) if isinstance(session_id, str) else None
    if session is None or session.closed or session.tenant != tenant:
        raise _no_session(str(session_id))
    return session
