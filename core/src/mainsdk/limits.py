"""The limits core enforces from outside the driver: output, the backstop deadline and cancellation.

A driver kills at the time limit itself; core cuts output at ``limits.output``
and, should a driver overrun its deadline, cancels the command a grace period
later so no backend can hold a run past its limit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from decimal import Decimal

import attrs

from mainsdk.driver import ExecOutcome, StopReason
from mainsdk.errors import HOST_NOT_ALLOWED
from mainsdk.redact import NameRedactor, StreamRedactor

log = logging.getLogger("mainsdk")

# How long past its timeout core waits for a driver before cancelling the command itself.
DEADLINE_GRACE = 5.0
# How long a stream must be quiet before a complete key match that could still grow is released (as the marker).
QUIET_RELEASE = 0.05

# Linux's signal numbers (every box is Linux, whatever the app's host): a crash reports 128 + N, as the shell does.
LINUX_SIGNALS: dict[int, str] = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
    9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM",
    16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU",
    23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO",
    30: "SIGPWR", 31: "SIGSYS",
}  # fmt: skip
_SIGNAL_NUMBERS = {name: number for number, name in LINUX_SIGNALS.items()} | {"SIGIOT": 6, "SIGPOLL": 29}
SIGNAL_EXIT_BASE = 128  # the shell's convention: killed by signal N exits with 128 + N
MAX_SIGNAL = 64  # SIGRTMAX on Linux


def signal_status(
    exit_code: int | None, signal: int | str | None, stop: StopReason | None
) -> tuple[int | None, str | None]:
    """The ``(exit_code, signal name)`` a result reports for a command a driver saw end.

    Killed by signal N (a crash, or a kill from inside the box): ``128 + N`` and the name
    (``"SIGSEGV"``; None for a real-time signal). Stopped at a limit (``stop`` set): the sandbox
    ended it, so no signal is reported (which one a driver uses to stop is its own business) and the
    exit code is what the driver gave (None when it killed the code). Otherwise the exit code as is.
    """
    if stop is not None:
        return (exit_code if signal is None else None), None
    number: int | None = None
    if isinstance(signal, str):
        number = _SIGNAL_NUMBERS.get(signal.upper() if signal.upper().startswith("SIG") else f"SIG{signal.upper()}")
    elif isinstance(signal, int) and not isinstance(signal, bool) and 0 < signal <= MAX_SIGNAL:
        number = signal
    if number is None:
        return exit_code, None
    return SIGNAL_EXIT_BASE + number, LINUX_SIGNALS.get(number)


Listener = Callable[[str, bytes], None]

# Refused hosts are chosen by the code, so each bound below caps what one run can push into a result,
# an audit event and the app's log (one run once logged 14,000 lines and an 874 KB event).
MAX_HOSTS_REFUSED = 50  # kept in the result and the audit event; more are only counted
MAX_HOST_LENGTH = 253  # a DNS name's longest; a longer string is cut
MAX_REASON_LENGTH = 300  # why a host that was given was refused anyway (its addresses): cut past this
MAX_HOSTS_TRACKED = 10_000  # distinct hosts remembered to count them; past this, each refusal counts
MAX_REFUSED_LOG_LINES = 20  # warning lines per run (one per host); then one "and N more" line


class OutputCollector:
    """Collects stdout and stderr up to a shared byte limit, redacting as it goes.

    When the limit is passed, the output is cut exactly at it and ``full`` is set,
    which tells the run to stop the command. ``listener``, if given, sees the
    redacted chunks as they are released (``"stdout"`` or ``"stderr"``, bytes):
    at once, but for the few bytes that could still be the start of a secret.
    It also keeps the hosts the code was refused, redacted and bounded; ``label``
    (the run's id) names the run in their log lines.
    """

    def __init__(
        self, limit: int, secret_values: Iterable[bytes], listener: Listener | None = None, *, label: str = ""
    ) -> None:
        values = tuple(secret_values)
        self._limit = limit
        self._taken = 0
        self._redactors = {"stdout": StreamRedactor(values), "stderr": StreamRedactor(values)}
        self._parts: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        self._listener = listener
        self.cut = False
        self.full = asyncio.Event()
        self.hosts_refused: list[str] = []
        self.hosts_refused_dropped = 0  # distinct refused hosts past MAX_HOSTS_REFUSED
        self.redact_name = NameRedactor(values)
        self._label = label
        self._hosts_seen: set[str] = set()
        self._logged = 0
        self._not_logged = 0
        self._quiet_timer: asyncio.TimerHandle | None = None
        self._listener_error: Exception | None = None

    def stdout(self, data: bytes) -> None:
        """Take a chunk of standard output."""
        self._take("stdout", data)

    def stderr(self, data: bytes) -> None:
        """Take a chunk of standard error."""
        self._take("stderr", data)

    def host_refused(self, host: str, why: str = "") -> None:
        """Note a host the code tried and was refused: redacted, cut, kept (or counted) and logged once. ``why``: it
        was given, and the driver refused it anyway for this reason, which its entry and the log line then say."""
        name = self.redact_name(str(host))[:MAX_HOST_LENGTH]
        if name in self._hosts_seen:
            return
        if len(self._hosts_seen) < MAX_HOSTS_TRACKED:
            self._hosts_seen.add(name)
        reason = self.redact_name(str(why))[:MAX_REASON_LENGTH] if why else ""
        if len(self.hosts_refused) < MAX_HOSTS_REFUSED:
            self.hosts_refused.append(f"{name} ({reason})" if reason else name)
        else:
            self.hosts_refused_dropped += 1
        if self._logged < MAX_REFUSED_LOG_LINES:
            self._logged += 1
            if reason:
                message = "%s: the code tried %s, a host this sandbox run was given, and it was refused: %s (%s)"
                log.warning(message, HOST_NOT_ALLOWED, name, reason, self._label)
            else:
                message = "%s: the code tried %s, a host this sandbox run was not given (%s)"
                log.warning(message, HOST_NOT_ALLOWED, name, self._label)
        else:
            self._not_logged += 1

    def _take(self, stream: str, data: bytes) -> None:
        room = self._limit - self._taken
        if len(data) > room:
            data = data[: max(room, 0)]
            if not self.cut:
                self.cut = True
                self.full.set()
        if not data:
            return
        self._taken += len(data)
        self._release(stream, self._redactors[stream].feed(data))
        self._arm_quiet_timer()

    def _arm_quiet_timer(self) -> None:
        """Once the streams pause for QUIET_RELEASE, release what a pause decides (see ``StreamRedactor.quiet``)."""
        if self._quiet_timer is not None:
            self._quiet_timer.cancel()
            self._quiet_timer = None
        if not any(r.holding for r in self._redactors.values()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # fed outside a loop (a driver's own thread): finish() releases the rest
        self._quiet_timer = loop.call_later(QUIET_RELEASE, self._on_quiet)

    def _on_quiet(self) -> None:
        self._quiet_timer = None
        try:
            for stream, redactor in self._redactors.items():
                self._release(stream, redactor.quiet())
        except Exception as exc:  # noqa: BLE001 - the listener's own: raised from finish, as from a feed
            self._listener_error = exc

    def _release(self, stream: str, data: bytes) -> None:
        if data:
            self._parts[stream].append(data)
            if self._listener is not None:
                self._listener(stream, data)

    def finish(self) -> tuple[str, str]:
        """Flush both streams and return them as text (undecodable bytes replaced); log the refusals not logged."""
        stdout, stderr = self.finish_bytes()
        return stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")

    def finish_bytes(self) -> tuple[bytes, bytes]:
        """Flush both streams and return their exact redacted bytes; log the refusals not logged."""
        if self._quiet_timer is not None:
            self._quiet_timer.cancel()
            self._quiet_timer = None
        if self._listener_error is not None:
            error, self._listener_error = self._listener_error, None
            raise error
        if self._not_logged:
            log.warning("%s: and %d more hosts refused (%s)", HOST_NOT_ALLOWED, self._not_logged, self._label)
            self._not_logged = 0
        for stream, redactor in self._redactors.items():
            self._release(stream, redactor.finish(cut=self.cut))
        return b"".join(self._parts["stdout"]), b"".join(self._parts["stderr"])


def cost_of(price: Decimal, duration: float) -> Decimal:
    """What ``duration`` seconds cost at ``price`` per second, to the millisecond."""
    return (price * Decimal(str(round(duration, 3)))).normalize()


@attrs.frozen
class LimitedOutcome:
    """The facts of a command run under core's limits; ``mainsdk.lifecycle.stop_reason`` judges them.

    ``driver_stop``: the stop the driver reported. ``output_cut``: core cut the output at its limit.
    ``timed_out``: the driver overran its deadline and core cancelled the command. ``signal`` is the
    driver's, as it gave it (see ``signal_status``).
    """

    exit_code: int | None
    driver_stop: StopReason | None
    output_cut: bool
    timed_out: bool
    duration: float
    hosts_refused: tuple[str, ...] = ()
    hosts_refused_dropped: int = 0  # refused hosts past the ones kept in ``hosts_refused``
    signal: int | str | None = None


async def exec_within_limits(
    start_exec: Callable[[], Awaitable[ExecOutcome]], collector: OutputCollector, timeout: float
) -> LimitedOutcome:
    """Run one command, stopping it when its output passes the limit or the driver overruns its deadline.

    Cancelling the caller cancels the command, and waits for the driver to kill it.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.ensure_future(start_exec())
    full = asyncio.ensure_future(collector.full.wait())
    try:
        await asyncio.wait({task, full}, timeout=timeout + DEADLINE_GRACE, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await _cancel_and_wait(task)
        raise
    finally:
        full.cancel()
    if task.done():
        outcome = task.result()
        for host in outcome.hosts_refused:  # a driver may report them here rather than as they happen
            collector.host_refused(host)
        return LimitedOutcome(
            outcome.exit_code,
            outcome.stop,
            collector.cut,
            False,
            outcome.duration,
            tuple(collector.hosts_refused),
            collector.hosts_refused_dropped,
            outcome.signal,
        )
    await _cancel_and_wait(task)
    duration = loop.time() - started
    cut = collector.cut
    return LimitedOutcome(
        None, None, cut, not cut, duration, tuple(collector.hosts_refused), collector.hosts_refused_dropped
    )


async def _cancel_and_wait(task: asyncio.Future[ExecOutcome]) -> None:
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        # The stop stands (the limit was reached); a driver that failed while killing should still be seen.
        log.warning("the driver failed while stopping a command at its limit", exc_info=True)
