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

from mainsdk import arguments, errors, preflight
from mainsdk.audit import AuditEvent
from mainsdk.driver import Box, Command, NetworkPolicy, StopReason
from mainsdk.errors import BoxGone, SandboxError
from mainsdk.files import FileRef
from mainsdk.limits import Listener, cost_of

if TYPE_CHECKING:
    from mainsdk.background import AsyncProcess
    from mainsdk.cells import CellResult, Interpreter
    from mainsdk.engine import AsyncSandbox

DEFAULT_IDLE = 300.0
MAX_BACKGROUND = 16  # background processes running at once in one session


@attrs.frozen
class _Prepared:
    """A session command that passed its checks, with the audit event it will complete."""

    id: str
    event: AuditEvent
    command: Command
    cost_bound: bool
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


class AsyncSession:
    """An open box. Use it as ``async with``; it closes on exit."""

    def __init__(
        self,
        sandbox: AsyncSandbox,
        session_id: str,
        tenant: str,
        feature: str | None,
        box: Box,
        plan: preflight.RunPlan,
        idle: float,
        isolation: str,
        extra_reach: tuple[str, ...] = (),
        detached: bool = False,
    ) -> None:
        self.id = session_id
        self.tenant = tenant
        self.feature = feature
        self.cost = Decimal(0)
        self._sandbox = sandbox
        self._box = box
        self._plan = plan
        self._idle = idle
        self._isolation = isolation
        self._extra_reach = extra_reach
        # The egress policy the box was started with (``mainsdk_network_policy``), on each command's audit event.
        self.network_policy: NetworkPolicy = None
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
    def closed(self) -> bool:
        """Whether the session is closed (by ``close``, idle expiry or the app's exit)."""
        return self._closed

    async def _close_when_idle(self) -> None:
        while not self._closed:
            remaining = self._last_used + self._idle - time.monotonic()
            if remaining <= 0 and not self._busy:
                if self._detached:
                    self._closed = True
                    self._sandbox._sessions.pop(self.id, None)
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
        if len(payload) > self._plan.limits.files:
            raise SandboxError(errors.INVALID_OPTION, f"data: {len(payload)} bytes for {path!r} is above limits.files")
        async with self._use():
            await self._sandbox._driver_call(self._sandbox.hooks.write_file(self._box, checked, payload))

    async def read(self, path: str) -> bytes:
        """Read a file from the work folder, or from the out folder as ``../out/name``."""
        if not isinstance(path, str):
            raise arguments.invalid("path", f"must be a string, not {arguments.type_name(path)}")
        checked = path[len("../out/") :] if path.startswith("../out/") else path
        arguments.relative_path(checked, "path")
        async with self._use():
            data: bytes = await self._sandbox._driver_call(self._sandbox.hooks.read_file(self._box, path))
            return data

    async def out_files(self) -> tuple[tuple[FileRef, ...], tuple[str, ...]]:
        """What the box's out folder holds now, as FileRefs of the session's tenant (path order), and the names of
        those not kept (past limits.files, not regular files). The folder is left as it is.
        """
        async with self._use():
            collected = await self._sandbox._driver_call(
                self._sandbox.hooks.collect(self._box, self._plan.limits.files)
            )
        return self._sandbox.keep_collected(self.tenant, collected, self._plan.secret_values)

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

    def _prepare(self, program: str, args: Sequence[str], timeout: object, on_output: Listener | None) -> _Prepared:
        """A checked command and its audit event; a refusal is audited and raised, and nothing runs."""
        command_id = f"cmd_{token.token_hex(8)}"
        event = AuditEvent(
            id=command_id,
            kind="command",
            driver=self._sandbox.driver_id,
            feature=self.feature,
            tenant=self.tenant,
            session_id=self.id,
            isolation=self._isolation,
            hosts=self._plan.hosts,
            extra_reach=self._extra_reach,
            network_policy=self.network_policy,
            env_names=self._plan.env_names,
        )
        try:
            on_output = arguments.listener(on_output)
            command, cost_bound = self._command(program, args, timeout)
            self._sandbox._check_command(command)
        except SandboxError as exc:
            self._sandbox._audit(attrs.evolve(event, kind="refused", error=exc.code))
            raise
        return _Prepared(command_id, event, command, cost_bound, on_output)

    async def _execute(self, prepared: _Prepared) -> CommandResult:
        """Run a prepared command to its end under the session's limits; audit it and count its cost."""
        event = prepared.event
        try:
            executed = await self._sandbox.execute(
                self._box,
                prepared.command,
                self._plan.limits.output,
                self._plan.secret_values,
                prepared.on_output,
            )
        except BaseException as exc:
            error = exc.code if isinstance(exc, SandboxError) else type(exc).__name__
            self._sandbox._audit(attrs.evolve(event, error=error))
            raise
        outcome = executed.outcome
        cost = cost_of(self._plan.price, outcome.duration)
        self.cost += cost
        stop = outcome.stop
        if stop == "timeout" and prepared.cost_bound:
            stop = "cost"
        result = CommandResult(
            id=prepared.id,
            session_id=self.id,
            stdout=executed.stdout,
            stderr=executed.stderr,
            stdout_bytes=executed.stdout_bytes,
            stderr_bytes=executed.stderr_bytes,
            exit_code=outcome.exit_code,
            stop=stop,
            duration=outcome.duration,
            cost=cost,
            hosts_refused=outcome.hosts_refused,
            hosts_refused_dropped=outcome.hosts_refused_dropped,
            signal=outcome.signal,
        )
        self._sandbox._audit(
            attrs.evolve(
                event,
                duration=outcome.duration,
                exit_code=outcome.exit_code,
                stop=stop,
                cost=cost,
                hosts_refused=outcome.hosts_refused,
                hosts_refused_dropped=outcome.hosts_refused_dropped,
            )
        )
        return result

    def start(
        self, program: str, args: Sequence[str] = (), *, timeout: object = None, on_output: Listener | None = None
    ) -> AsyncProcess:
        """Start ``program`` with ``args`` in the background and return its handle at once.

        It runs under the session's limits like ``run`` (its own time limit, lowered by ``timeout``;
        the memory limit; output up to ``limits.output``, kept for ``output()``), is audited and
        costed when it ends, and dies with the session. At most 16 run at once in a session.
        """
        from mainsdk.background import AsyncProcess

        if self._closed:
            raise _no_session(self.id)
        if not self._sandbox.capabilities().background:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"the {self._sandbox.driver_id!r} driver does not declare background processes "
                "(Capabilities.background); run the program with session.run(...) there",
            )
        running = [p for p in self._processes if p.running]
        if len(running) >= MAX_BACKGROUND:
            raise SandboxError(
                errors.INVALID_OPTION,
                f"session {self.id} already runs {MAX_BACKGROUND} background processes; wait for or kill one first",
            )
        process = AsyncProcess(self, program, args, timeout, on_output)
        self._processes = [*running, process]
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

    def _command(self, program: str, args: Sequence[str], timeout: object) -> tuple[Command, bool]:
        """The command to send, its time limit cut to what the cost ceiling leaves (and whether it was)."""
        if self._closed:
            raise _no_session(self.id)
        program = arguments.program(program)
        args = arguments.program_args(args)
        arguments.command_args_with_env(args, self._plan.env)
        limit = self._plan.limits.timeout
        if timeout is not None:
            limit = preflight.lower_limits({"timeout": timeout}, self._sandbox.config).timeout
            limit = min(limit, self._plan.limits.timeout)
        cost_bound = False
        if self._plan.max_cost is not None and self._plan.price > 0:
            left = self._plan.max_cost - self.cost
            if left <= 0:
                raise SandboxError(
                    errors.COST, f"session {self.id} has spent ${self.cost}, its whole max-cost ${self._plan.max_cost}"
                )
            affordable = float(left / self._plan.price)
            if affordable < limit:
                limit, cost_bound = affordable, True
        return Command(program, tuple(args), timeout=limit, env=self._plan.env), cost_bound

    async def close(self) -> None:
        """Close the session and remove everything its box held. Closing twice is fine."""
        if self._closed:
            return
        self._closed = True
        self._sandbox._session_ended(self.id)
        if self._watchdog is not asyncio.current_task():
            self._watchdog.cancel()
        await asyncio.shield(self._stop_everything())

    async def _stop_everything(self) -> None:
        # The interpreter and background processes first (the driver kills each tree), then the box.
        if self._interpreter is not None:
            await self._interpreter.kill()
        for process in self._processes:
            await process.kill()
        await self._sandbox._stop_box(self._box)

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
