"""``AsyncSandbox``: the sandbox interface, and where each call enters the box lifecycle.

A run, a session and its commands and cells go through ``mainsdk.lifecycle`` (plan -> start -> exec
within limits -> collect -> stop -> audit). This is the one implementation; ``Sandbox`` (in
``mainsdk.sync``) drives it from synchronous code.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets as token
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from mainsdk import arguments, checkpoints, figures, preflight
from mainsdk.action import AccessRule, AgentBudget, CodeRunAction, Risk
from mainsdk.audit import AuditEvent, code_sha256
from mainsdk.checkpoints import SessionOptions, Snapshot, SnapshotRecord, Snapshots
from mainsdk.config import AppConfig, SandboxConfig
from mainsdk.driver import CHECKPOINT_KINDS, LANGUAGE_PROGRAMS, Capabilities, Command
from mainsdk.errors import SandboxError
from mainsdk.files import AsyncFiles, FileStore, LocalDirectoryFileStore, checked_tenant
from mainsdk.hookspecs import hookimpl
from mainsdk.hosts import host_covered
from mainsdk.lifecycle import Lifecycle, OpenBox, RunPlan, RunResult, SessionPlan
from mainsdk.limits import Listener
from mainsdk.plugins import Hooks, load_driver, make_plugin_manager
from mainsdk.preflight import BoxOptions
from mainsdk.secrets import SecretRef, SecretResolver, environment_secrets
from mainsdk.session_runtime import paused_session
from mainsdk.sessions import DEFAULT_IDLE, AsyncSession, CheckpointContext, SessionOpener, find_paused, find_session

# Code longer than this goes on the interpreter's stdin rather than its argv (Linux caps one argument at 128 KiB).
ARGV_CODE_LIMIT = 100_000
log = logging.getLogger("mainsdk")
DEFAULT_TENANT = "default"
T = TypeVar("T")


def _app_config(value: object) -> AppConfig:
    """``deps.config``: an ``AppConfig``, or the ``SandboxConfig`` that ``parse_sandbox_config`` returns."""
    if isinstance(value, AppConfig):
        return value
    if isinstance(value, SandboxConfig):
        return AppConfig(sandbox=value)  # the pairing the README shows: the sandbox section, nothing else
    raise arguments.invalid(
        "deps.config",
        f"must be an AppConfig (load_config(), parse_app_config(...)) or a SandboxConfig (parse_sandbox_config(...)), "
        f"not {arguments.type_name(value)}",
    )


def _optional_callable(name: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not callable(value):
            raise arguments.invalid(f"deps.{name}", f"must be a function, not {arguments.type_name(value)}")

    return check


def _optional_protocol(name: str, *methods: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    def check(_instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
        missing = [m for m in methods if not callable(getattr(value, m, None))]
        if value is not None and missing:
            raise arguments.invalid(
                f"deps.{name}",
                f"a {arguments.type_name(value)} has no {' or '.join(missing)} method; pass an object with "
                f"{', '.join(methods)}, or None",
            )

    return check


def _driver_option(_instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, (str, bytes, int, float, Mapping, Sequence)):
        raise arguments.invalid(
            "deps.driver",
            f"must be a driver plugin like local_sandbox_driver(...), or None to load sandbox.driver, "
            f"not {arguments.type_name(value)}",
        )


def _network_option(_instance: Any, _attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not callable(value):
        arguments.hosts(value, "deps.network")


def _plugin_list(value: object) -> tuple[object, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, set, frozenset)):
        raise arguments.invalid("deps.plugins", f"must be a list of plugin objects, not {arguments.type_name(value)}")
    return tuple(value)


def sandbox_deps(deps: object) -> SandboxDeps:
    """``deps`` as ``SandboxDeps``: None (every default), a ``SandboxDeps``, or a mapping of its fields."""
    if deps is None:
        return SandboxDeps()
    if isinstance(deps, SandboxDeps):
        return deps
    if not isinstance(deps, Mapping):
        raise arguments.invalid(
            "deps", f"must be SandboxDeps(...) or a mapping of its fields, not {type(deps).__name__}"
        )
    fields = [f.name for f in attrs.fields(SandboxDeps)]
    unknown = [key for key in deps if key not in fields]
    if unknown:
        raise arguments.invalid("deps", f"{unknown[0]!r} is not a field; the fields are {', '.join(fields)}")
    return SandboxDeps(**deps)


@arguments.checked_calls("SandboxDeps")
@attrs.frozen
class SandboxDeps:
    """What a sandbox is built from; the seed's ``deps``.

    ``driver``: a driver plugin (e.g. ``local_sandbox_driver(...)``); None loads
    the one ``config.sandbox.driver`` names through its entry point.
    ``network``: the ``network.allow`` matcher, a callable or a list of host
    patterns; None uses ``config.network_allow``. ``secret``: resolves a secret
    name to its value (default: the app's environment). ``files``: the FileRef
    store (default: a private temporary directory). ``log``: an extra audit
    sink, called with each ``AuditEvent``. ``tenancy``: returns the current
    tenant id (default ``"default"``). ``environment``: ``production`` or
    ``development`` (default: ``MAINSDK_ENV``). ``agents``: the budget
    ``sandbox.action`` charges; ``access``: the approval rule it consults.
    ``plugins``: extra pluggy
    plugins; ``load_entrypoints=False`` loads no installed plugin (for tests).
    """

    config: AppConfig = attrs.field(factory=AppConfig, converter=_app_config)
    driver: object | None = attrs.field(default=None, validator=_driver_option)
    network: Callable[[str], bool] | Sequence[str] | None = attrs.field(default=None, validator=_network_option)
    secret: SecretResolver | None = attrs.field(default=None, validator=_optional_callable("secret"))
    files: FileStore | None = attrs.field(default=None, validator=_optional_protocol("files", "put", "read"))
    log: Callable[[AuditEvent], None] | None = attrs.field(default=None, validator=_optional_callable("log"))
    tenancy: Callable[[], str] | None = attrs.field(default=None, validator=_optional_callable("tenancy"))
    environment: str | None = attrs.field(
        default=None, validator=lambda _i, _a, value: arguments.optional_text(value, "deps.environment")
    )
    agents: AgentBudget | None = attrs.field(
        default=None, validator=_optional_protocol("agents", "remaining", "charge")
    )
    access: AccessRule | None = attrs.field(default=None, validator=_optional_protocol("access", "approve"))
    plugins: Sequence[object] = attrs.field(default=(), converter=_plugin_list)
    load_entrypoints: bool = attrs.field(
        default=True, validator=lambda _i, _a, value: arguments.boolean(value, "deps.load_entrypoints")
    )


class _AuditSink:
    """Wraps ``deps.log`` as a plugin."""

    def __init__(self, log: Callable[[AuditEvent], None]) -> None:
        self._log = log

    @hookimpl
    def mainsdk_audit_event(self, event: AuditEvent) -> None:
        self._log(event)


def code_command(language: str, code: str, timeout: float, env: Mapping[str, str]) -> Command:
    """The command that runs ``code``: the language's interpreter with the code in argv, or on stdin when long."""
    on_stdin = len(code.encode()) > ARGV_CODE_LIMIT
    if language == "python":
        return figures.python_command(code, on_stdin=on_stdin, timeout=timeout, env=env)  # plots come back as PNGs
    program = LANGUAGE_PROGRAMS[language]
    if on_stdin:
        stdin_flag = {"node": "-", "bash": "-s"}[language]
        return Command(program, (stdin_flag,), stdin=code.encode(), timeout=timeout, env=env)
    code_flag = {"node": "-e", "bash": "-c"}[language]
    return Command(program, (code_flag, code), timeout=timeout, env=env)


# What a session id looks like (``ses_`` and 24 hex digits): anything else is never sent to a driver.
SESSION_ID = re.compile(r"ses_[0-9a-f]{24}")
SNAPSHOT_ID = re.compile(r"snap_[0-9a-f]{24}")  # as session.snapshot() makes them
ENDED_KEPT = 10_000


@arguments.checked_calls("sandbox")
class AsyncSandbox:
    """The sandbox interface for ``asyncio`` code. ``Sandbox`` is its synchronous twin."""

    def __init__(self, deps: SandboxDeps | Mapping[str, Any] | None = None) -> None:
        deps = sandbox_deps(deps)
        self.deps = deps
        self.config = deps.config
        self.driver_id = deps.config.sandbox.driver
        self._resolver = deps.secret or environment_secrets
        driver = deps.driver
        if driver is None:
            driver = load_driver(self.driver_id, deps.config, secret=self._resolver)
        extra = list(deps.plugins) + ([_AuditSink(deps.log)] if deps.log else [])
        self._pm = make_plugin_manager(driver, plugins=extra, load_entrypoints=deps.load_entrypoints)
        self.hooks = Hooks(self._pm, self.driver_id)
        network = deps.network
        if network is None:
            network = deps.config.network_allow
        if callable(network):
            self._network_allow: Callable[[str], bool] = network
        else:
            patterns = tuple(network)
            self._network_allow = lambda host: host_covered(host, patterns)
        self._store = deps.files or LocalDirectoryFileStore()
        self._lifecycle = Lifecycle(
            self.hooks,
            self.driver_id,
            self.config,
            environment=deps.environment,
            network_allow=self._network_allow,
            resolver=self._resolver,
            store=self._store,
        )
        self._tenancy = deps.tenancy or (lambda: DEFAULT_TENANT)
        self.files = AsyncFiles(self._store, self._tenancy)
        self._sessions: dict[str, AsyncSession] = {}
        # Sessions closed in this process (the newest ENDED_KEPT): never looked up at the driver again.
        self._ended: dict[str, None] = {}
        self._snapshots = Snapshots()
        self._checkpoints = CheckpointContext(self._snapshots, self._open_fork, deps.config.sandbox.on_idle)

    def capabilities(self) -> Capabilities:
        """What this sandbox's driver can do."""
        return self.hooks.capabilities()

    async def run(
        self,
        code: str,
        language: str = "python",
        *,
        files: Mapping[str, str | bytes] | None = None,
        network: Sequence[str] = (),
        env: Mapping[str, str | SecretRef] | None = None,
        feature: str | None = None,
        limits: Mapping[str, Any] | None = None,
        max_cost: object = None,
        on_output: Listener | None = None,
        packages: Sequence[str] | None = None,
        timeout: object = None,
        egress: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> RunResult:
        """Run ``code`` in a new box and return what it did.

        ``files`` go into the work folder; what the code writes to ``../out/``
        comes back as FileRefs. ``network`` names hosts the run may reach (each
        in ``sandbox.network`` and ``network.allow``); ``env`` the variables it
        gets, secrets through ``secret(name)``. ``limits`` lowers the config's
        limits (``{"timeout": "1s", "memory": "64MB"}``); ``timeout="1s"`` is the
        same as ``limits={"timeout": "1s"}``, as for ``run_code`` and ``start``. ``on_output`` sees the
        redacted output as it arrives (``"stdout"``/``"stderr"``, bytes). A run
        stopped at a limit returns with ``stop`` set; a refused call raises
        ``SandboxError`` and nothing runs. ``packages`` names the pinned packages
        of ``sandbox.packages.python`` the box gets (by name, like ``["pandas"]``);
        a python run gets all of them by default, a run in another language none.
        ``egress`` adds headers whose values are secrets to the code's requests to a host of ``network``,
        at the egress, so the code uses a credential it cannot read:
        ``egress={"api.example.com": {"headers": {"X-Api-Key": secret("EXAMPLE_KEY")}}}`` (``mainsdk.egress``).
        """
        run_id = f"run_{token.token_hex(8)}"
        tenant = self.tenant()
        event = AuditEvent(
            id=run_id,
            kind="run",
            driver=self.driver_id,
            feature=feature if isinstance(feature, str) else None,
            tenant=tenant,
            language=language if isinstance(language, str) else None,
            code_sha256=code_sha256(code) if isinstance(code, str) else None,
        )

        def plan_run() -> RunPlan:
            return self._lifecycle.plan_run(
                run_id,
                tenant,
                code=code,
                language=language,
                feature=feature,
                on_output=on_output,
                options=BoxOptions(files, network, env, with_timeout(limits, timeout), max_cost, packages, egress),
                command_for=code_command,
            )

        plan = self._lifecycle.plan(event, plan_run)
        return await self._lifecycle.run_once(plan, event)

    def action(
        self,
        *,
        name: str = "code.run",
        intent: str = "Run code",
        languages: Sequence[str] = ("python",),
        risk: Risk = "write",
        feature: str | None = None,
        session: bool = False,
        network: Sequence[str] = (),
        egress: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> CodeRunAction:
        """A code-runner action for agents; see ``mainsdk.action``.

        ``session=True`` keeps one Python interpreter per agent conversation (``mainsdk.action_cells``).
        ``network`` and ``egress`` are given to every run of the action, as to ``run``'s: the agent's code
        calls the hosts, with credentials it never sees.
        """
        return CodeRunAction(
            self,
            name=name,
            intent=intent,
            languages=languages,
            risk=risk,
            feature=feature,
            session=session,
            network=network,
            egress=egress,
        )

    def create(
        self,
        *,
        feature: str | None = None,
        idle: object = DEFAULT_IDLE,
        files: Mapping[str, str | bytes] | None = None,
        network: Sequence[str] = (),
        env: Mapping[str, str | SecretRef] | None = None,
        limits: Mapping[str, Any] | None = None,
        max_cost: object = None,
        packages: Sequence[str] | None = None,
        egress: Mapping[str, Mapping[str, Any]] | None = None,
        snapshot: Snapshot | str | None = None,
    ) -> SessionOpener:
        """Open a session: one box kept across commands, closed after ``idle`` (default 5 minutes) without a call.

        Await it (``session = await async_sandbox.create(...)``) or use it as
        ``async with``. The options are ``run``'s; every command gets the
        session's limits, hosts and environment. ``packages``: as for ``run``; a
        session gets every package of ``sandbox.packages.python`` by default.

        ``snapshot``: a ``Snapshot`` (or its id) of the current tenant (``session.snapshot()``): the box starts
        with its files, then ``files`` over them; the options are this call's, the secrets bound now. A deleted,
        expired or another tenant's snapshot is MAIN-SANDBOX-0008; a kind the driver does not offer 0001.
        """
        options = SessionOptions(feature, idle, BoxOptions(files, network, env, limits, max_cost, packages, egress))

        async def open_session() -> AsyncSession:
            return await self._open(options, snapshot, None)

        return SessionOpener(open_session)

    async def _open_fork(self, options: SessionOptions, snapshot_id: str, source: str) -> AsyncSession:
        return await self._open(options, snapshot_id, source, hidden_ok=True)

    async def _open(
        self, options: SessionOptions, snapshot: object, source: str | None, *, hidden_ok: bool = False
    ) -> AsyncSession:
        """Open a session from ``options``, from ``snapshot`` when given; a fork's (``source``) is audited as one."""
        session_id = f"ses_{token.token_hex(12)}"
        tenant = self.tenant()
        event = self._lifecycle.opening_event(session_id, tenant, options.feature)
        if source is not None:
            event = attrs.evolve(event, source_session=source)

        def plan_session() -> SessionPlan:
            snapshot_id = self._snapshot_for(snapshot, tenant, hidden_ok=hidden_ok)
            plan = self._lifecycle.plan_session(session_id, tenant, options)
            return attrs.evolve(plan, spec=attrs.evolve(plan.spec, snapshot=snapshot_id)) if snapshot_id else plan

        if source is None:
            await self._find_snapshot(snapshot, tenant)
        plan = self._lifecycle.plan(event, plan_session)
        opened = await self._lifecycle.open(plan, event)
        session = AsyncSession(
            self._lifecycle,
            opened,
            plan.idle,
            ended=self._session_ended,
            checkpoints=self._checkpoints,
            options=options.without_files(),  # the opening's files are in the box: not kept twice
            restarted=plan.spec.snapshot is not None,
        )
        self._sessions[session_id] = session
        if source is not None:
            # Each fork's own event: its session, its source, the snapshot it started from.
            self._lifecycle.audit(
                attrs.evolve(
                    opened.event(f"fork_{token.token_hex(8)}", "fork"),
                    source_session=source,
                    snapshot_id=plan.spec.snapshot,
                )
            )
        return session

    async def _find_snapshot(self, snapshot: object, tenant: str) -> None:
        """Learn of ``tenant``'s snapshot ``snapshot`` from the driver, when another process made it there
        (``mainsdk_driver_find_snapshot``): it is then this sandbox's to start from and delete, as its own are."""
        snapshot_id = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        if not isinstance(snapshot_id, str) or not SNAPSHOT_ID.fullmatch(snapshot_id):
            return
        with contextlib.suppress(SandboxError):
            self._snapshots.find(snapshot_id, tenant)
            return
        found = await self.hooks.find_snapshot(snapshot_id, tenant)
        if found is not None and found.kind in CHECKPOINT_KINDS:
            snapshot = checkpoints.found(snapshot_id, found)
            self._snapshots.add(SnapshotRecord(snapshot, tenant, SessionOptions()))

    def _snapshot_for(self, snapshot: object, tenant: str, *, hidden_ok: bool) -> str | None:
        """The id of the snapshot a session starts from (checked: the tenant's, live, a kind the driver has)."""
        if snapshot is None:
            return None
        if hidden_ok and isinstance(snapshot, str):
            return snapshot  # a fork's own snapshot, made by this process a moment ago
        if not isinstance(snapshot, (Snapshot, str)):
            raise arguments.invalid("snapshot", f"must be a Snapshot or its id, not {arguments.type_name(snapshot)}")
        record = self._snapshots.find(snapshot, tenant)
        checkpoints.check_kind(self.capabilities(), self.driver_id, record.snapshot.kind, "snapshot")
        return record.snapshot.id

    async def resume(self, session_id: str) -> AsyncSession:
        """Let the paused session ``session_id`` of the current tenant run again, and return it.

        Its files (and, where the driver keeps memory, its interpreters) are as they were at ``pause``; its
        secrets are bound again from the names it was opened with, as ``deps.secret`` resolves them now.
        Resuming a running session returns it. Another tenant's, a closed or an unknown one is MAIN-SANDBOX-0008.
        One audit event, ``resume``.
        """
        tenant = self.tenant()
        try:
            session = find_paused(self._sessions, session_id, tenant)
        except SandboxError:
            # Paused by another process, where the driver reaches it (mainsdk_driver_reconnect).
            reached = await self._reconnect(session_id, tenant)
            if reached is None:
                raise
            session = reached

        def plan_again(options: SessionOptions) -> Any:
            return self._lifecycle.plan_session(session.id, tenant, options).box

        await session.resume_paused(plan_again)
        return session

    def snapshots(self) -> list[Snapshot]:
        """The current tenant's snapshots, oldest first (deleted and expired ones are gone)."""
        return self._snapshots.listed(self.tenant())

    async def delete_snapshot(self, snapshot: Snapshot | str) -> None:
        """Delete a snapshot of the current tenant: no session starts from it again (MAIN-SANDBOX-0008), while
        sessions already made from it go on. Unknown, deleted, expired or another tenant's: MAIN-SANDBOX-0008.
        One audit event, ``delete_snapshot``.
        """
        tenant = self.tenant()
        snapshot_id = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        event = AuditEvent(
            id=f"delete_{token.token_hex(8)}",
            kind="delete_snapshot",
            driver=self.driver_id,
            feature=None,
            tenant=tenant,
            snapshot_id=snapshot_id if isinstance(snapshot_id, str) else None,
        )
        await self._find_snapshot(snapshot, tenant)
        record = self._lifecycle.plan(event, lambda: self._snapshots.find(snapshot, tenant))
        self._snapshots.pop(record.snapshot.id)
        try:
            await self._lifecycle.delete_snapshot(record.snapshot.id)
        except BaseException as exc:
            self._lifecycle.audit_failed(event, exc)
            raise
        self._lifecycle.audit(attrs.evolve(event, session_id=record.snapshot.session_id))

    async def get(self, session_id: str) -> AsyncSession:
        """The open session ``session_id`` of the current tenant; ``MAIN-SANDBOX-0008`` otherwise.

        A session another process opened (a web app's other worker) is reached
        through the driver, when it can (``mainsdk_driver_reconnect``): the
        driver checks the tenant it recorded at start. The reconnected session
        runs with ``main.yaml``'s default limits and no secrets, since what its
        opener passed stays with the opener.
        """
        tenant = self.tenant()
        try:
            return find_session(self._sessions, session_id, tenant)
        except SandboxError:
            session = await self._reconnect(session_id, tenant)
            if session is None:
                raise
            if session.paused:  # paused by another process: kept here, for sandbox.resume
                raise paused_session(session.id) from None
            return session

    def _session_ended(self, session_id: str) -> None:
        """Note that a session closed in this process, so ``get`` never asks the driver for it."""
        self._sessions.pop(session_id, None)
        self._ended[session_id] = None
        while len(self._ended) > ENDED_KEPT:
            del self._ended[next(iter(self._ended))]

    async def _reconnect(self, session_id: object, tenant: str) -> AsyncSession | None:
        """The session ``session_id`` of ``tenant`` from the driver, if another process opened it; else None."""
        if not isinstance(session_id, str) or not SESSION_ID.fullmatch(session_id):
            return None
        if session_id in self._sessions or session_id in self._ended:
            return None  # held here (another tenant's), or closed here: closed everywhere
        caps = self.hooks.capabilities()
        if not caps.sessions:
            return None
        idle = preflight.check_idle(DEFAULT_IDLE)
        # The running box has what its opener chose; this process plans its commands with the config's defaults.
        plan = self._lifecycle.plan_box(caps, BoxOptions(packages=()))
        spec = self._lifecycle.box_spec(session_id, plan, idle=idle, tenant=tenant, session=True)
        box = await self._lifecycle.reconnect(spec)
        if box is None:
            return None
        opened = OpenBox(box, plan, spec, None, caps.isolation)
        session = AsyncSession(
            self._lifecycle,
            opened,
            idle,
            ended=self._session_ended,
            detached=True,
            checkpoints=self._checkpoints,
            paused=await self.hooks.paused(box),
        )
        self._sessions[session_id] = session
        return session

    def tenant(self) -> str:
        """The current tenant, from ``deps.tenancy``; a wrong answer is the app's mistake, named as such."""
        return checked_tenant(self._tenancy)

    async def aclose(self) -> None:
        """Release what the driver holds for this process."""
        self.hooks.shutdown()


def with_timeout(limits: Mapping[str, Any] | None, timeout: object) -> Mapping[str, Any] | None:
    """A call's ``limits`` with its ``timeout=`` option in them: one time limit, given once."""
    if timeout is None or (limits is not None and not isinstance(limits, Mapping)):
        return limits  # a limits that is no mapping is refused, naming limits, by the plan's own check
    given = dict(limits or {})
    if "timeout" in given:
        raise arguments.invalid("timeout", "is given twice, as timeout= and in limits; give it once")
    return {**given, "timeout": timeout}
