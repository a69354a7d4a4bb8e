"""Background processes in a session: started, read, waited for and killed while the session goes on.

A background process is a session command whose caller does not wait: the same checks, limits, redaction,
audit event and cost as ``session.run``, run as a task. It dies when it is killed, at its time limit, or
when the session closes or expires (the driver kills its whole process tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

from mainsdk import arguments, units
from mainsdk.lifecycle import Ending, Executed
from mainsdk.limits import Listener
from mainsdk.session_runtime import CommandResult, SessionRuntime

SIGKILL = 9


@arguments.checked_calls("process")
class AsyncProcess:
    """A program running in the background of a session; ``session.start(...)`` returns it.

    Its output is redacted as it arrives, like a command's: ``output()`` shows what it printed so far, less
    only a tail that could still be the start of a secret (it shows once the next bytes decide it).
    """

    def __init__(
        self,
        session: SessionRuntime,
        program: str,
        args: Sequence[str],
        timeout: object,
        on_output: Listener | None,
        refuse: Callable[[], None] | None = None,
    ) -> None:
        self._session = session
        self._listener: Listener | None = None
        self._chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

        def checks() -> None:
            self._listener = arguments.listener(on_output)
            if refuse is not None:
                refuse()

        # A refusal (the listener, ``refuse``'s own, the command's plan) is audited and raised here; nothing runs.
        prepared = session.prepare(program, args, timeout, self._take, checks)
        self.id = prepared.id
        self._started = time.monotonic()
        self._killed: CommandResult | None = None
        self._task = asyncio.ensure_future(session.execute(prepared))

    def __await__(self) -> Generator[Any, None, AsyncProcess]:
        """``await session.start(...)`` gives the handle too: it has started once ``start`` returns.

        Async code awaits calls by habit; ``start`` itself returns at once, so awaiting it is the same handle.
        """
        yield from ()  # a generator that yields nothing: awaiting it returns at once, without suspending
        return self

    def _take(self, stream: str, data: bytes) -> None:
        self._chunks[stream].append(data)
        if self._listener is not None:
            self._listener(stream, data)

    @property
    def running(self) -> bool:
        """Whether the process is still running."""
        return not self._task.done()

    def output(self) -> tuple[str, str]:
        """Its stdout and stderr so far, redacted (undecodable bytes replaced)."""
        return (
            b"".join(self._chunks["stdout"]).decode("utf-8", "replace"),
            b"".join(self._chunks["stderr"]).decode("utf-8", "replace"),
        )

    async def wait(self, timeout: float | str | None = None) -> CommandResult:
        """Wait for it to end, at most ``timeout`` seconds (None: until it ends, at its time limit at the latest).

        Returns its result; ``TimeoutError`` when it is still running after ``timeout`` (as ``subprocess``'s
        ``wait`` does: ``job.wait(timeout="10s").stdout`` is never an ``AttributeError`` on None). Waiting never
        stops it: wait again, or ``kill()``.
        """
        if timeout is not None:
            await asyncio.wait({self._task}, timeout=_seconds(timeout))
        else:
            await asyncio.wait({self._task})
        if not self._task.done():
            raise TimeoutError(
                f"background process {self.id} still runs after {timeout}; waiting never stops it: wait again "
                "(job.wait(timeout=...)), read job.output() so far, or job.kill()"
            )
        if self._killed is not None:
            return self._killed
        return self._task.result()

    async def kill(self) -> CommandResult:
        """Kill its whole process tree (when still running) and return its result.

        A killed process reports ``exit_code`` 137 and ``signal`` ``"SIGKILL"``, with the output it made.
        """
        if self._task.done():
            if self._killed is not None:
                return self._killed
            return self._task.result()
        self._task.cancel()
        # Cancelled, or the driver failed while killing: the process is over either way.
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        session = self._session
        stdout, stderr = self.output()
        # Killed by its caller, not at a limit: no stop, and the signal reported as a shell would (137, SIGKILL).
        executed = Executed(
            exit_code=None,
            driver_stop=None,
            output_cut=False,
            timed_out=False,
            duration=time.monotonic() - self._started,
            signal=SIGKILL,
            stdout=stdout,
            stderr=stderr,
        )
        ended = session.lifecycle.ended(executed, session.opened.plan.price, Ending())
        session.cost += ended.cost
        self._killed = CommandResult.of(self.id, session.id, executed, ended)
        return self._killed


def _seconds(value: object) -> float:
    """``wait``'s timeout: 0, seconds or a duration like ``"2s"`` (at most a day)."""
    # The shape first (a number that is not a bool, finite, or a string): ``Decimal("sNaN") == 0`` raises.
    checked = arguments.limit_value(value, "timeout")
    if not isinstance(checked, str) and checked == 0:
        return 0.0
    try:
        return units.parse_duration(checked)
    except ValueError as exc:
        raise arguments.invalid("timeout", str(exc)) from None
