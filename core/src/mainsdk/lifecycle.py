"""One box lifecycle: plan -> start -> exec within limits -> collect -> stop -> audit.

A one-shot run (``AsyncSandbox.run``), a session command (``AsyncSession.run`` and its background twin
``AsyncSession.start``) and a notebook cell (``AsyncSession.run_code``) all go through ``Lifecycle``:

- **plan**: every refusal is decided before anything starts, while a value is built that says what will
  run: the call's arguments, the driver's capabilities, ``preflight.plan_run`` (limits, hosts, secrets,
  files, packages, cost) and the driver's own check of the command in that box (``mainsdk_driver_check``).
  ``Lifecycle.plan`` is the one place a refusal is audited, once, as ``refused``.
- **start**: ``mainsdk_driver_start`` with the box the plan describes and the driver's egress policy
  (``mainsdk_network_policy``, asked once); a session starts its box once and keeps it.
- **exec within limits**: ``Lifecycle.execute``: output cut and redacted, core's backstop deadline.
- **collect**: the out folder into the file store (``Lifecycle.collect``, ``Lifecycle.keep_collected``).
- **stop**: ``mainsdk_driver_stop``, always (``Lifecycle.stop``).
- **audit**: ``Lifecycle.audit_ended``: one event per run, session command or cell, also when it failed.

``stop_reason`` is the one function that decides why a command stopped (``timeout``, ``memory``,
``output``, ``cost``), from the facts each kind of call observed (``Ending``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, TypeVar

import attrs

from mainsdk import arguments, egress, errors, figures, preflight
from mainsdk.audit import AuditEvent
from mainsdk.checkpoints import SessionOptions
from mainsdk.config import AppConfig
from mainsdk.driver import (
    Box,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    Isolation,
    NetworkPolicy,
    OutFile,
    OutputSink,
    StopReason,
    extra_reach,
)
from mainsdk.errors import SandboxError
from mainsdk.files import FileRef, FileStore
from mainsdk.limits import LimitedOutcome, Listener, OutputCollector, cost_of, exec_within_limits, signal_status
from mainsdk.plugins import Hooks
from mainsdk.redact import NameRedactor
from mainsdk.rich import RichResult, rich_entry
from mainsdk.secrets import SecretRef, SecretResolver

log = logging.getLogger("mainsdk")
P = TypeVar("P")


@attrs.frozen
class Ending:
    """The facts of how a command ended, as each kind of call observed them; ``stop_reason`` judges them.

    ``driver_stop``: what the driver (or, for a cell, the interpreter's own timer) reported: ``timeout``
    or ``memory``. ``output_cut``: core cut the output at ``limits.output``. ``timed_out``: the command
    ran past its time limit and core ended it (its backstop deadline, a cell's watchdog). ``files_cut``:
    the out folder held more than ``limits.files`` or the collection's bounds. ``cost_bound``: the time
    limit was what the cost ceiling left, so a timeout is the cost's.
    """

    driver_stop: StopReason | None = None
    output_cut: bool = False
    timed_out: bool = False
    files_cut: bool = False
    cost_bound: bool = False


def stop_reason(ending: Ending) -> StopReason | None:
    """Why a command stopped, or None: the one place this is decided, for runs, commands and cells alike.

    What the driver saw comes first (it killed the code at the limit it names), then core's own cuts:
    the output, the deadline, the out folder. A timeout under a time limit the cost ceiling set is ``cost``.
    """
    stop = ending.driver_stop
    if stop is None and ending.output_cut:
        stop = "output"
    if stop is None and ending.timed_out:
        stop = "timeout"
    if stop is None and ending.files_cut:
        stop = "output"
    if stop == "timeout" and ending.cost_bound:
        stop = "cost"
    return stop


@attrs.frozen
class Executed(LimitedOutcome):
    """A command run under core's limits: the facts of its end and its redacted output (``Lifecycle.execute``)."""

    stdout: str = ""
    stderr: str = ""
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""

    def ending(self, *, files_cut: bool = False, cost_bound: bool = False) -> Ending:
        """The facts of its end, for ``stop_reason``."""
        return Ending(self.driver_stop, self.output_cut, self.timed_out, files_cut, cost_bound)


@attrs.frozen
class Ended:
    """A command's end as a result reports it: the one stop reason, the exit status as a shell shows it, the cost."""

    stop: StopReason | None
    exit_code: int | None
    signal: str | None
    duration: float
    cost: Decimal
    hosts_refused: tuple[str, ...] = ()
    hosts_refused_dropped: int = 0


@attrs.frozen
class RunPlan:
    """A one-shot run that passed every check: the box it gets, the command it runs and who hears its output.

    Nothing has started when it exists.
    """

    box: preflight.RunPlan
    spec: BoxSpec  # the box to start, with the driver's egress policy for its hosts
    command: Command
    language: str
    caps: Capabilities
    on_output: Listener | None = None


@attrs.frozen
class SessionPlan:
    """A session that passed every check: the box it keeps, and how long it may sit idle."""

    box: preflight.RunPlan
    spec: BoxSpec  # the box to start, with the driver's egress policy for its hosts
    caps: Capabilities
    idle: float


@attrs.frozen
class CommandPlan:
    """A command planned for an open box: what is sent, and whether its time limit is what the cost ceiling left."""

    command: Command
    cost_bound: bool = False


@attrs.define
class OpenBox:
    """A started box kept across commands (a session's), with what every command in it is planned against."""

    box: Box
    plan: preflight.RunPlan
    spec: BoxSpec  # what the box was started with (for a reconnected box: the config's defaults)
    feature: str | None
    isolation: str
    extra_reach: tuple[str, ...] = ()

    @property
    def session_id(self) -> str:
        """The session's id, which is its box's."""
        return self.spec.id

    @property
    def tenant(self) -> str:
        """Whose box it is."""
        return self.spec.tenant

    @property
    def network_policy(self) -> NetworkPolicy:
        """The egress policy the box was started with (``mainsdk_network_policy``), on each command's audit event."""
        return self.spec.network_policy

    def event(self, event_id: str, kind: Any, **fields: Any) -> AuditEvent:
        """The audit event of a command or cell in this box, to complete when it ends."""
        return AuditEvent(
            id=event_id,
            kind=kind,
            driver="",  # set by Lifecycle.audit
            feature=self.feature,
            tenant=self.tenant,
            session_id=self.session_id,
            isolation=self.isolation,
            hosts=self.plan.hosts,
            extra_reach=self.extra_reach,
            network_policy=self.network_policy,
            env_names=self.plan.env_names,
            egress=egress.audit_entries(self.plan.egress),
            **fields,
        )


@attrs.frozen
class RunResult:
    """What a run did. A stopped run has ``stop`` set; it is returned, not raised.

    ``exit_code`` is the code's exit status; when the code died of a signal (a crash, a kill from inside the
    box) it is ``128 + N`` as in a shell, and ``signal`` names it (``"SIGSEGV"``). A run stopped at a limit
    has ``stop`` set and ``signal`` None. ``ok`` is true only for a clean exit: no stop, exit code 0.
    """

    id: str
    stdout: str
    stderr: str
    exit_code: int | None
    stop: StopReason | None
    files: tuple[FileRef, ...]
    isolation: Isolation
    duration: float
    cost: Decimal
    driver: str
    language: str
    hosts_refused: tuple[str, ...] = ()  # hosts the code tried and was not given (redacted, at most 50)
    hosts_refused_dropped: int = 0  # how many more were refused than ``hosts_refused`` lists
    # What the memory limit held for (``Capabilities.memory_limit_scope``): "tree", "process", or None.
    memory_limit_scope: Literal["tree", "process"] | None = None
    signal: str | None = None  # the signal the code died of ("SIGSEGV"); exit_code is then 128 + its number
    # Out files the code wrote that did not come back: past limits.files, not a regular file, or the store
    # could not keep them (disk full). Names redacted, in path order.
    files_dropped: tuple[str, ...] = ()
    # The exact output bytes, redacted and cut at the limit; ``stdout``/``stderr`` are them decoded (UTF-8, lossy).
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    # Python runs: each matplotlib figure the code showed or left open, as ``image/png`` (``mainsdk.figures``),
    # inline up to 64 KiB, else a FileRef; ``results_dropped`` counts those not returned.
    results: tuple[RichResult, ...] = ()
    results_dropped: int = 0

    @property
    def ok(self) -> bool:
        """Whether the code ran to a clean exit: not stopped, exit code 0."""
        return self.stop is None and self.exit_code == 0

    def __await__(self) -> Any:
        # ``await sandbox.run(...)``: the synchronous call has run the code and returned this; say where the async
        # API is rather than Python's "object RunResult can't be used in 'await' expression".
        raise TypeError(
            "sandbox.run(...) is the synchronous API: it already ran the code and returned this RunResult, which "
            "cannot be awaited; in async code use mainsdk.async_sandbox: `await async_sandbox.run(...)` (from "
            "mainsdk import async_sandbox)"
        )

    @property
    def stop_code(self) -> str | None:
        """The seed's code for the stop (``MAIN-SANDBOX-0002`` for a timeout ...), or None."""
        return errors.STOP_CODES[self.stop] if self.stop else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the result."""
        data = attrs.asdict(self)
        del data["stdout_bytes"], data["stderr_bytes"]  # JSON has no bytes: ``stdout``/``stderr`` carry the text
        data["cost"] = str(self.cost)
        data["files"] = [attrs.asdict(f) for f in self.files]
        data["results"] = [rich_entry(r) for r in self.results]
        data["stop_code"] = self.stop_code
        return data

    def to_json(self) -> str:
        """``to_dict`` as JSON text."""
        return json.dumps(self.to_dict())


class Lifecycle:
    """The box lifecycle of one sandbox: its driver's hooks, its config, its allowlist, secrets and file store."""

    def __init__(
        self,
        hooks: Hooks,
        driver_id: str,
        config: AppConfig,
        *,
        environment: str | None,
        network_allow: Callable[[str], bool],
        resolver: SecretResolver,
        store: FileStore,
    ) -> None:
        self.hooks = hooks
        self.driver_id = driver_id
        self.config = config
        self._environment = environment
        self._network_allow = network_allow
        self._resolver = resolver
        self.store = store

    # -- plan: every refusal, before anything starts ------------------------------------------------------

    def plan(self, event: AuditEvent, planner: Callable[[], P]) -> P:
        """What ``planner`` decides, or its refusal: the one place a refusal is audited, once, as ``refused``.

        Nothing has started when a planner runs, so a refusal leaves nothing behind.
        """
        try:
            return planner()
        except SandboxError as exc:
            self.audit(attrs.evolve(event, kind="refused", error=exc.code))
            raise

    def capabilities(self) -> Capabilities:
        """What the driver can do (through the one driver boundary, ``mainsdk.plugins.Hooks``)."""
        return self.hooks.capabilities()

    def plan_run(
        self,
        run_id: str,
        tenant: str,
        *,
        code: object,
        language: object,
        feature: object,
        on_output: object,
        options: preflight.BoxOptions,
        command_for: Callable[[str, str, float, Mapping[str, str]], Command],
    ) -> RunPlan:
        """Every check of a one-shot run, in the order a user would fix them; ``command_for`` builds its command."""
        arguments.optional_text(feature, "feature")
        listener = arguments.listener(on_output)
        language = arguments.language(language)
        code = arguments.code(code)
        caps = self.capabilities()
        preflight.check_driver_allowed(self.driver_id, caps, self._environment)
        preflight.check_language(language, caps, self.driver_id)
        if options.packages is None and language != "python":
            options = attrs.evolve(options, packages=())  # python packages by default only for python code
        box = self.plan_box(caps, options)
        command = command_for(language, code, box.limits.timeout, box.env)
        spec = self.box_spec(run_id, box, tenant=tenant)
        self.hooks.check(command, spec)
        return RunPlan(box, spec, command, language, caps, listener)

    def plan_session(self, session_id: str, tenant: str, options: SessionOptions) -> SessionPlan:
        """Every check of a session's opening (or of a fork, or a resume, planned again from its options)."""
        arguments.optional_text(options.feature, "feature")
        caps = self.capabilities()
        preflight.check_driver_allowed(self.driver_id, caps, self._environment)
        if not caps.sessions:
            raise SandboxError(errors.INVALID_OPTION, f"the {self.driver_id!r} driver cannot keep a session open")
        idle_seconds = preflight.check_idle(options.idle)
        box = self.plan_box(caps, options.box)
        spec = self.box_spec(session_id, box, idle=idle_seconds, tenant=tenant, session=True)
        return SessionPlan(box, spec, caps, idle_seconds)

    def plan_command(
        self, opened: OpenBox, program: object, args: object, timeout: object, spent: Decimal
    ) -> CommandPlan:
        """Every check of a command in an open box; its time limit cut to what the cost ceiling leaves."""
        program = arguments.program(program)
        checked_args = arguments.program_args(args)
        arguments.command_args_with_env(checked_args, opened.plan.env)
        plan = opened.plan
        limit = plan.limits.timeout
        if timeout is not None:
            limit = min(preflight.lower_limits({"timeout": timeout}, self.config).timeout, limit)
        cost_bound = False
        if plan.max_cost is not None and plan.price > 0:
            left = plan.max_cost - spent
            if left <= 0:
                raise SandboxError(
                    errors.COST, f"session {opened.session_id} has spent ${spent}, its whole max-cost ${plan.max_cost}"
                )
            affordable = float(left / plan.price)
            if affordable < limit:
                limit, cost_bound = affordable, True
        command = Command(program, tuple(checked_args), timeout=limit, env=plan.env)
        self.hooks.check(command, opened.spec)
        return CommandPlan(command, cost_bound)

    def plan_box(self, caps: Capabilities, options: preflight.BoxOptions) -> preflight.RunPlan:
        """The box a call gets, checked against this sandbox's config, allowlist, secrets and driver."""
        return preflight.plan_run(
            config=self.config,
            caps=caps,
            driver_id=self.driver_id,
            network_allow=self._network_allow,
            resolver=self._resolver,
            files=options.files,
            network=options.network,
            env=options.env,
            limits=options.limits,
            max_cost=options.max_cost,
            packages=options.packages,
            egress_rules=options.egress,
        )

    # -- start --------------------------------------------------------------------------------------------

    def box_spec(
        self,
        box_id: str,
        plan: preflight.RunPlan,
        *,
        idle: float | None = None,
        tenant: str = "",
        session: bool = False,
    ) -> BoxSpec:
        """The box a planned call starts, with the driver's egress policy for its hosts.

        Asked for once, in the plan: the driver's check sees it, the start hook gets it, the audit event records it.
        """
        return BoxSpec(
            id=box_id,
            limits=plan.limits,
            files=plan.files,
            hosts=plan.hosts,
            network_policy=self.hooks.network_policy(plan.hosts),
            idle=idle,
            tenant=tenant,
            packages=plan.packages,
            session=session,
            egress=plan.egress,
        )

    async def start(self, spec: BoxSpec) -> Box:
        """Start the box ``spec`` describes."""
        return await self.hooks.start(spec)

    def opening_event(self, session_id: str, tenant: str, feature: object) -> AuditEvent:
        """The event of a session's opening, written only when it is refused or its box never opens."""
        shown = feature if isinstance(feature, str) else None
        return AuditEvent(
            id=session_id, kind="refused", driver=self.driver_id, feature=shown, tenant=tenant, session_id=session_id
        )

    async def open(self, plan: SessionPlan, event: AuditEvent) -> OpenBox:
        """Start a session's box; a box that never opened is on record like a refusal, with its policy."""
        try:
            box = await self.start(plan.spec)
        except SandboxError as exc:
            # The box never opened: nothing ran, and the failure is on record like any refusal, with the policy.
            self.audit(attrs.evolve(event, kind="refused", error=exc.code, network_policy=plan.spec.network_policy))
            raise
        return OpenBox(
            box, plan.box, plan.spec, event.feature, plan.caps.isolation, extra_reach(plan.caps, plan.box.hosts)
        )

    async def reconnect(self, spec: BoxSpec) -> Box | None:
        """A session's box another process started (``mainsdk_driver_reconnect``), or None."""
        return await self.hooks.reconnect(spec)

    # -- exec within limits -------------------------------------------------------------------------------

    async def execute(
        self,
        box: Box,
        command: Command,
        output_limit: int,
        secret_values: Sequence[bytes],
        on_output: Listener | None = None,
    ) -> Executed:
        """Run one command in a started box under core's limits: output cut and redacted, backstop deadline.

        This is the one place an error escaping a driver's exec is judged: once the command may
        have been sent, it is ``ran=None`` and not retryable unless the driver said nothing ran.
        An exception raised by ``on_output`` itself is the app's, and is re-raised as it is.
        """
        listener_errors: list[Exception] = []

        def guarded(stream: str, data: bytes) -> None:
            assert on_output is not None
            try:
                on_output(stream, data)
            except Exception as exc:
                listener_errors.append(exc)
                raise

        collector = OutputCollector(
            output_limit, secret_values, guarded if on_output is not None else None, label=str(getattr(box, "id", box))
        )
        try:
            outcome = await exec_within_limits(
                lambda: self.hooks.exec(box, command, collector), collector, command.timeout
            )
        except SandboxError as exc:
            if listener_errors:
                raise listener_errors[0] from None
            raise exc.after_exec() from exc.__cause__
        stdout, stderr = collector.finish_bytes()
        return Executed(
            **attrs.asdict(outcome, recurse=False),
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            stdout_bytes=stdout,
            stderr_bytes=stderr,
        )

    def cell_env(self, env: Mapping[str, str | SecretRef] | None) -> tuple[dict[str, str], tuple[bytes, ...]]:
        """A cell's own env (``run_code(env=...)``) checked as a run's: secrets only under ``sandbox.secrets``."""
        return preflight.resolve_env(env, self.config, self._resolver)

    async def kernel_site(self, box: Box, language: str) -> str | None:
        """Where the driver put the cell kernel's packages for ``language`` in ``box`` (None: it has none)."""
        return await self.hooks.kernel_site(box, language)

    def exec_unlimited(self, box: Box, command: Command, output: OutputSink) -> Awaitable[ExecOutcome]:
        """Start a long-lived command whose limits its caller keeps itself (a cell's interpreter)."""
        return self.hooks.exec(box, command, output)

    def ended(self, executed: Executed, price: Decimal, ending: Ending) -> Ended:
        """A command's end as its result reports it: ``stop_reason`` of ``ending``, its exit status, its cost."""
        stop = stop_reason(ending)
        # A signal is reported only when the code died of one by itself: not when the sandbox ended it at a
        # limit. Too many out files stops the result (``output``) but ended nothing.
        ended_by_sandbox = ending.driver_stop is not None or ending.output_cut or ending.timed_out
        exit_code, signal = signal_status(executed.exit_code, executed.signal, stop if ended_by_sandbox else None)
        return Ended(
            stop=stop,
            exit_code=exit_code,
            signal=signal,
            duration=executed.duration,
            cost=cost_of(price, executed.duration),
            hosts_refused=executed.hosts_refused,
            hosts_refused_dropped=executed.hosts_refused_dropped,
        )

    # -- files in an open box -----------------------------------------------------------------------------

    async def write_file(self, box: Box, folder: Folder, path: str, data: bytes) -> None:
        """Write a file into one of a box's folders (``path`` already checked)."""
        await self.hooks.write_file(box, folder, path, data)

    async def read_file(self, box: Box, folder: Folder, path: str) -> bytes:
        """Read a file from one of a box's folders (``path`` already checked)."""
        return await self.hooks.read_file(box, folder, path)

    # -- checkpoints ----------------------------------------------------------------------------------------

    async def snapshot(self, box: Box, snapshot_id: str, kind: str) -> float | None:
        """Keep a box's state as a snapshot (``mainsdk_driver_snapshot``); when it expires, or None."""
        return await self.hooks.snapshot(box, snapshot_id, kind)

    async def delete_snapshot(self, snapshot_id: str) -> None:
        """Forget a snapshot (``mainsdk_driver_delete_snapshot``)."""
        await self.hooks.delete_snapshot(snapshot_id)

    async def pause(self, box: Box) -> None:
        """Pause a box (``mainsdk_driver_pause``)."""
        await self.hooks.pause(box)

    async def resume(self, box: Box) -> None:
        """Resume a paused box (``mainsdk_driver_resume``)."""
        await self.hooks.resume(box)

    # -- collect ------------------------------------------------------------------------------------------

    async def collect(self, box: Box, max_bytes: int, *, after_exec: bool = False) -> Collected:
        """The box's out folder; after a command ran, an error here is one raised after the code had run."""
        try:
            return await self.hooks.collect(box, max_bytes)
        except SandboxError as exc:
            if after_exec:
                raise exc.after_exec(ran=True) from exc.__cause__
            raise

    def keep_collected(
        self, tenant: str, collected: Collected, secret_values: Sequence[bytes]
    ) -> tuple[tuple[FileRef, ...], tuple[str, ...]]:
        """A box's collected out folder as FileRefs of ``tenant`` (path order), and the names of those not kept."""
        redact_name = NameRedactor(secret_values)
        # In path order whatever order the driver found them in, so a result lists its files the same way each time.
        kept = sorted(collected.files, key=lambda f: f.name)
        refs, not_stored = self._keep_files(tenant, kept, redact_name)
        # What the driver left out (past limits.files, a symlink, a fifo) is named beside what the store refused.
        skipped = (redact_name(name) for name, _why in collected.skipped if name and name != "...")
        return refs, tuple(sorted({*not_stored, *skipped}))

    def _keep_files(
        self, tenant: str, files: Sequence[OutFile], redact_name: Callable[[str], str]
    ) -> tuple[tuple[FileRef, ...], tuple[str, ...]]:
        """Put the out files in the store; one it cannot keep (disk full, too large) is named, not raised.

        The run has finished by now: its output and exit code must reach the caller whatever the store says.
        The code chose the names: redacted like its output before they leave the box, kept or dropped.
        """
        refs: list[FileRef] = []
        dropped: list[str] = []
        for file in files:
            name = redact_name(file.name)
            try:
                refs.append(self.store.put(tenant, name, file.data))
            except OSError as exc:
                dropped.append(name)
                # No name or path in the log: a file name is the code's text and may hold anything.
                log.warning("the file store could not keep an out file of %d bytes (%s)", len(file.data), exc.strerror)
        return tuple(refs), tuple(dropped)

    def keep_file(self, tenant: str, name: str, data: bytes) -> FileRef | None:
        """Keep ``data`` in the file store as ``tenant``'s; None when the store cannot (disk full)."""
        try:
            return self.store.put(tenant, name, data)
        except OSError:
            return None

    # -- stop ---------------------------------------------------------------------------------------------

    async def stop(self, box: Box) -> None:
        """Stop a box, always; a failure to stop is logged, never raised over the run's result."""
        try:
            await self.hooks.stop(box)
        except Exception:
            # The run's result stands; a box that failed to stop is the driver's to report.
            log.exception("driver %s failed to stop box %s", self.driver_id, box.id)

    # -- audit --------------------------------------------------------------------------------------------

    def audit(self, event: AuditEvent) -> None:
        """Send one event to every audit sink."""
        if not event.driver:
            event = attrs.evolve(event, driver=self.driver_id)
        self.hooks.audit(event, self.config)

    def audit_ended(self, event: AuditEvent, ended: Ended) -> None:
        """The one event of a run, command or cell that ended (stopped or not)."""
        self.audit(
            attrs.evolve(
                event,
                duration=ended.duration,
                exit_code=ended.exit_code,
                stop=ended.stop,
                cost=ended.cost,
                hosts_refused=ended.hosts_refused,
                hosts_refused_dropped=ended.hosts_refused_dropped,
            )
        )

    def audit_failed(self, event: AuditEvent, exc: BaseException, started: float | None = None) -> None:
        """The one event of a call that raised after it passed its plan (a driver outage, a cancel)."""
        error = exc.code if isinstance(exc, SandboxError) else type(exc).__name__
        duration = None if started is None else time.monotonic() - started
        self.audit(attrs.evolve(event, error=error, duration=duration))

    # -- the whole lifecycle of a one-shot run --------------------------------------------------------------

    async def run_once(self, plan: RunPlan, event: AuditEvent) -> RunResult:
        """Start a box, run the planned command within its limits, collect, stop, audit the run once: its result."""
        box_plan = plan.box
        event = attrs.evolve(
            event,
            kind="run",
            isolation=plan.caps.isolation,
            hosts=box_plan.hosts,
            extra_reach=extra_reach(plan.caps, box_plan.hosts),
            env_names=box_plan.env_names,
            egress=egress.audit_entries(box_plan.egress),
            # The policy the driver is asked to enforce, on record (a translation of the hosts: no secret).
            network_policy=plan.spec.network_policy,
        )
        started = time.monotonic()
        try:
            box = await self.start(plan.spec)
            try:
                executed = await self.execute(
                    box, plan.command, box_plan.limits.output, box_plan.secret_values, plan.on_output
                )
                collected = await self.collect(box, box_plan.limits.files, after_exec=True)
            finally:
                await asyncio.shield(self.stop(box))
            ended = self.ended(executed, box_plan.price, executed.ending(files_cut=collected.truncated))
            split = figures.take_figures(collected)  # the figures folder holds results, not the code's files
            refs, dropped = self.keep_collected(plan.spec.tenant, split.collected, box_plan.secret_values)
            drawn = figures.keep_figures(split, lambda name, data: self.store.put(plan.spec.tenant, name, data))
        except BaseException as exc:
            self.audit_failed(event, exc, started)
            raise
        self.audit_ended(event, ended)
        return RunResult(
            id=plan.spec.id,
            stdout=executed.stdout,
            stderr=executed.stderr,
            stdout_bytes=executed.stdout_bytes,
            stderr_bytes=executed.stderr_bytes,
            **attrs.asdict(ended, recurse=False),  # its stop, exit status, signal, duration, cost, refused hosts
            files=refs,
            isolation=plan.caps.isolation,
            driver=self.driver_id,
            language=plan.language,
            memory_limit_scope=plan.caps.memory_limit_scope,
            files_dropped=dropped,
            results=drawn.results,
            results_dropped=drawn.dropped,
        )
