"""What a session's commands, cells and background processes share: its open box, cost and open/busy state.

``AsyncSession`` (``mainsdk.sessions``) is what the app holds; the interpreter of its cells
(``mainsdk.cells``) and its background processes (``mainsdk.background``) hold this, the session's runtime,
and go through its public calls: ``check_open``, ``use``, ``prepare`` and ``execute``. So they never reach
into the session, and none of the three modules imports another.
"""

from __future__ import annotations

import contextlib
import secrets as token
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from decimal import Decimal

import attrs

from mainsdk import arguments, errors
from mainsdk.audit import AuditEvent
from mainsdk.driver import StopReason
from mainsdk.errors import BoxGone, SandboxError
from mainsdk.lifecycle import CommandPlan, Ended, Executed, Lifecycle, OpenBox
from mainsdk.limits import Listener


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

    @classmethod
    def of(cls, command_id: str, session_id: str, executed: Executed, ended: Ended) -> CommandResult:
        """The result of a command that ran (``executed``) and ended as ``ended`` says."""
        return cls(
            id=command_id,
            session_id=session_id,
            stdout=executed.stdout,
            stderr=executed.stderr,
            stdout_bytes=executed.stdout_bytes,
            stderr_bytes=executed.stderr_bytes,
            **attrs.asdict(ended, recurse=False),  # its stop, exit status, signal, duration, cost, refused hosts
        )

    @property
    def ok(self) -> bool:
        """Whether the command ran to a clean exit: not stopped, exit code 0."""
        return self.stop is None and self.exit_code == 0

    @property
    def stop_code(self) -> str | None:
        """The seed's code for the stop, or None."""
        return errors.STOP_CODES[self.stop] if self.stop else None


@attrs.frozen
class PreparedCommand:
    """A session command that passed its checks, with the audit event it will complete."""

    id: str
    event: AuditEvent
    plan: CommandPlan
    on_output: Listener | None


def no_session(session_id: str) -> SandboxError:
    """MAIN-SANDBOX-0008 for ``session_id``."""
    # The same words for unknown, closed, expired and another tenant's: nothing says the id exists elsewhere.
    return SandboxError(errors.NO_SESSION, f"no open sandbox session {session_id!r} in the current tenant", status=404)


def paused_session(session_id: str) -> SandboxError:
    """MAIN-SANDBOX-0008 for a paused session, saying how to resume it."""
    return SandboxError(
        errors.NO_SESSION,
        f"sandbox session {session_id!r} is paused; resume it with sandbox.resume({session_id!r})",
        status=404,
    )


class SessionRuntime:
    """One session's open box and what every call in it shares: the lifecycle, the cost so far, open and busy.

    ``close`` is the session's own close (its interpreter and processes, then its box): called when the driver
    says the box is gone.
    """

    def __init__(self, lifecycle: Lifecycle, opened: OpenBox, *, close: Callable[[], Awaitable[None]]) -> None:
        self.lifecycle = lifecycle
        self.opened = opened
        self.id = opened.session_id
        self.tenant = opened.tenant
        self.cost = Decimal(0)
        self.closed = False
        self.busy = 0  # calls running now: an idle session is one with none for ``idle`` seconds
        self.last_used = time.monotonic()
        self.cells = 0  # cells run in the session: numbered across all its interpreters and their restarts
        self.paused = False  # ``session.pause``: nothing runs until ``sandbox.resume``
        self._close = close

    def check_open(self) -> None:
        """A closed session runs nothing: ``MAIN-SANDBOX-0008``; nor does a paused one, which says so."""
        if self.closed:
            raise no_session(self.id)
        if self.paused:
            raise paused_session(self.id)

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[None]:
        """Hold the session busy (not idle) for one call; a box the driver says is gone closes it (``0008``)."""
        self.check_open()
        self.busy += 1
        try:
            yield
        except BoxGone as exc:
            # The driver knows the box is gone (its backend died): the session is over, not unavailable.
            await self._close()
            raise SandboxError(
                errors.NO_SESSION,
                f"sandbox session {self.id!r} is gone: {exc.message}; open a new session",
                status=404,
                ran=False,
            ) from None
        finally:
            self.busy -= 1
            self.last_used = time.monotonic()

    def prepare(
        self,
        program: str,
        args: Sequence[str],
        timeout: object,
        on_output: Listener | None,
        refuse: Callable[[], None] | None = None,
    ) -> PreparedCommand:
        """A planned command and its audit event; a refusal is audited (by the lifecycle) and raised: nothing runs.

        ``refuse``: a check of the caller's own (a background process's), made inside the same plan.
        """
        command_id = f"cmd_{token.token_hex(8)}"
        event = self.opened.event(command_id, "command")

        def plan() -> tuple[Listener | None, CommandPlan]:
            listener = arguments.listener(on_output)
            self.check_open()
            if refuse is not None:
                refuse()
            return listener, self.lifecycle.plan_command(self.opened, program, args, timeout, self.cost)

        listener, command_plan = self.lifecycle.plan(event, plan)
        return PreparedCommand(command_id, event, command_plan, listener)

    async def execute(self, prepared: PreparedCommand) -> CommandResult:
        """Run a prepared command to its end under the session's limits; audit it once and count its cost."""
        lifecycle, plan = self.lifecycle, self.opened.plan
        try:
            executed = await lifecycle.execute(
                self.opened.box, prepared.plan.command, plan.limits.output, plan.secret_values, prepared.on_output
            )
        except BaseException as exc:
            lifecycle.audit_failed(prepared.event, exc)
            raise
        ended = lifecycle.ended(executed, plan.price, executed.ending(cost_bound=prepared.plan.cost_bound))
        self.cost += ended.cost
        lifecycle.audit_ended(prepared.event, ended)
        return CommandResult.of(prepared.id, self.id, executed, ended)
