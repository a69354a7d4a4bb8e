"""What core and a driver say to each other: the one module a driver imports core's contract from.

Core does the checks, the limits it can enforce from outside (output, the
backstop deadline, cost) and the audit; a driver starts boxes, runs commands
in them and reports what it saw. These are the values that cross that line.
A driver is a pluggy plugin implementing the hooks typed here (``Driver``, ``SessionDriver``,
``OptionalDriverHooks``), marked with ``mainsdk.hookspecs.hookimpl``.

Besides its own types, this module re-exports what a hook needs from the rest
of core: the errors and their codes, the secret and credential helpers, the
host-pattern and pin grammars, the duration parser and the out-file name
check. Helpers that drivers share but core never uses are the driver kit's
(``mainsdk_driverkit``).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

import attrs
import pluggy

# Re-exported for drivers (``X as X``: an explicit re-export). None of these modules imports this one.
from mainsdk.egress import HOP_BY_HOP as HOP_BY_HOP
from mainsdk.egress import EgressHeader as EgressHeader
from mainsdk.egress import EgressRule as EgressRule
from mainsdk.errors import COST as COST
from mainsdk.errors import DEFAULT_OUTAGE_REMEDY
from mainsdk.errors import DRIVER_UNAVAILABLE as DRIVER_UNAVAILABLE
from mainsdk.errors import HOST_NOT_ALLOWED as HOST_NOT_ALLOWED
from mainsdk.errors import INVALID_OPTION as INVALID_OPTION
from mainsdk.errors import MEMORY as MEMORY
from mainsdk.errors import NO_SESSION as NO_SESSION
from mainsdk.errors import OUTPUT as OUTPUT
from mainsdk.errors import SECRET_NOT_ALLOWED as SECRET_NOT_ALLOWED
from mainsdk.errors import TIMEOUT as TIMEOUT
from mainsdk.errors import BoxGone as BoxGone
from mainsdk.errors import SandboxError as SandboxError
from mainsdk.errors import before_command as before_command
from mainsdk.hosts import host_covered as host_covered
from mainsdk.hosts import validate_host_pattern as validate_host_pattern
from mainsdk.kernel_start import start_line_of as start_line_of
from mainsdk.out_names import UnsafeName as UnsafeName
from mainsdk.out_names import check_name as check_name
from mainsdk.packages import canonical_name as canonical_name
from mainsdk.packages import parse_pin as parse_pin
from mainsdk.secrets import Credential as Credential
from mainsdk.secrets import SecretResolver as SecretResolver
from mainsdk.secrets import environment_secrets as environment_secrets
from mainsdk.units import parse_duration as parse_duration

Language = Literal["python", "node", "bash"]
LANGUAGES: tuple[Language, ...] = ("python", "node", "bash")
# The languages of session cells (``session.run_code``, ``session.interpreter``): the kernel's executors, named as
# notebook users name them (E2B's contexts too), so JavaScript is "javascript" here where a run says "node".
CellLanguage = Literal["python", "javascript", "typescript", "bash"]
CELL_LANGUAGES: tuple[CellLanguage, ...] = ("python", "javascript", "typescript", "bash")
Isolation = Literal["microvm", "namespace", "weak"]
StopReason = Literal["timeout", "memory", "output", "cost"]

# The program core asks a driver to run for each language; a driver maps it to
# its own executable (the local driver through ``sandbox.local``).
LANGUAGE_PROGRAMS: Mapping[str, str] = {"python": "python3", "node": "node", "bash": "bash"}

# The protocols a driver can filter by host name: plain HTTP by its Host header, TLS by its SNI.
Scheme = Literal["http", "https"]

# The marker of mainsdk's pluggy hook specs (the driver hooks' on the protocols below); implementations are
# marked with ``mainsdk.hookspecs.hookimpl``.
PROJECT = "mainsdk"
hookspec = pluggy.HookspecMarker(PROJECT)

WORK_DIR = "/work"


class Folder(enum.Enum):
    """Which of a box's two folders a file hook means: the work folder the code starts in, or the out folder
    whose files come back. Core reads the user's ``../out/name`` once (``box_path``); a driver never parses a
    path prefix, it is told the folder."""

    WORK = "work"
    OUT = "out"


OUT_PREFIX = "../out/"  # how a user names a file of the out folder, from the work folder where the code starts


def box_path(path: str) -> tuple[Folder, str]:
    """The folder and the path within it that a user's box path names: ``../out/x`` is ``(OUT, "x")``, any other
    path ``(WORK, path)``. The path within is checked by the caller (``arguments.relative_path``)."""
    if path.startswith(OUT_PREFIX):
        return Folder.OUT, path[len(OUT_PREFIX) :]
    return Folder.WORK, path


@attrs.frozen
class NetworkReach:
    """Where a driver's host filtering holds, and what it opens beyond the hosts a run names.

    ``filtered``: the (scheme, port) pairs on which a named host is reached by
    its name while every other name is refused. Port ``None`` is any port (a
    proxy that sees every connection's target). A named host on a pair not
    listed is refused: E2B matches names only on port 80 (HTTP Host) and 443
    (TLS SNI), so ``(("http", 80), ("https", 443))``.
    ``extra``: reach the driver opens whenever a run names any host, wider than
    ``network.allow`` (E2B: ``"dns:8.8.8.8:53"``). Core copies it into the run's
    audit event, so the widening is on record; the driver's README says why.
    """

    filtered: tuple[tuple[Scheme, int | None], ...]
    extra: tuple[str, ...] = ()

    def filters(self, scheme: Scheme, port: int) -> bool:
        """True when a named host is reachable over ``scheme`` on ``port``."""
        return any(s == scheme and p in (None, port) for s, p in self.filtered)


@attrs.frozen
class Capabilities:
    """What a driver can do. Core refuses cleanly what a driver declares it cannot.

    Every field but ``isolation`` defaults to claiming nothing (no language, no memory limit, no
    sessions, not for production), as SQLAlchemy's suite requirements do: a driver that forgets to
    declare a capability gets the conformance tests needing it skipped, saying which, rather than
    failed. The conformance suite reads the same object to skip what does not apply.
    """

    isolation: Isolation
    languages: frozenset[str] = frozenset()  # of LANGUAGES; a run in another is refused (MAIN-SANDBOX-0001)
    network: bool = False  # can give a run the hosts it names
    wildcard_hosts: bool = False  # can give ``*.example.com``
    memory_limit: bool = False  # enforces ``limits.memory`` and reports ``stop="memory"``
    # What the memory limit holds for: "tree" the run's whole process tree (a cgroup, a VM), "process" each
    # process on its own (RLIMIT_AS: 8 processes may each take the limit); None: not declared.
    memory_limit_scope: Literal["tree", "process"] | None = None
    # A writable /tmp and HOME of the box's own: kept across a session's commands, gone with the box, never the
    # host's or another box's (pip, matplotlib and tempfile need them).
    private_tmp: bool = False
    # Holds ``permissions.disk.temp.max`` (``RunLimits.disk``) for all the box writes: work, out, /tmp and HOME.
    disk_limit: bool = False
    sessions: bool = False
    production: bool = False  # True: allowed when MAINSDK_ENV=production; otherwise refused (MAIN-SANDBOX-0011)
    price_per_second: Decimal = Decimal(0)  # the driver's own estimate; ``sandbox.price`` overrides it
    # Reports a command killed by a signal (``ExecOutcome.signal``), so a crash comes back as exit code 128+N with
    # the signal's name, never as exit_code None. The conformance suite checks it on drivers that declare it.
    reports_signals: bool = False
    # What to check when the driver fails: core names it in MAIN-SANDBOX-0006's message. A provider driver names
    # its account and token; the local driver its launcher, namespaces and /tmp. Core never guesses it.
    outage_remedy: str = DEFAULT_OUTAGE_REMEDY
    # Where host filtering works and what extra reach the driver opens; None: it gives no hosts, or has not declared.
    network_reach: NetworkReach | None = None
    # Session cells (``session.run_code``): core's kernel runs as one long exec while writes and other execs go on,
    # its output streamed as it is made, and its requests sent on its live stdin (``Command.input``), which a
    # driver declaring cells must deliver. Background processes (``session.start``): several execs run at once in a
    # session and each is killed, whole tree, on cancel. Declared only once the suite's tests pass on the driver.
    cells: bool = False
    # Of CELL_LANGUAGES: the languages the driver's cells run (each one the kernel's executor for it needs in the
    # box: node for javascript and typescript). A cell or interpreter in another is refused (MAIN-SANDBOX-0001).
    cells_languages: frozenset[str] = frozenset()
    background: bool = False
    # Puts the pinned packages of ``sandbox.packages`` in a box (``BoxSpec.packages``), without widening its network.
    # A driver without it refuses any call that would get packages (MAIN-SANDBOX-0001), never runs without them.
    packages: bool = False
    # Sets the headers of ``BoxSpec.egress`` on the box's requests to each named host (HTTPS included), replacing
    # a header of the same name the code sent, on no other host's, with the values never inside the box. A driver
    # without it refuses any call with ``egress`` (MAIN-SANDBOX-0001 naming the driver).
    egress_headers: bool = False
    # Of CHECKPOINT_KINDS: what ``session.snapshot``, ``session.fork`` and ``sandbox.create(snapshot=...)`` keep
    # (``mainsdk_driver_snapshot``): "filesystem" the box's files (its interpreters restart), "memory" its running
    # processes too. Empty: no checkpoints; asking for a kind not here is MAIN-SANDBOX-0001 before anything happens.
    checkpoint_kinds: frozenset[str] = frozenset()
    # Why a kind of CHECKPOINT_KINDS is missing from ``checkpoint_kinds`` here ("": not said); the refusal quotes it.
    checkpoint_why: str = ""
    # ``session.pause`` and ``sandbox.resume`` (``mainsdk_driver_pause``/``_resume``): a paused box runs nothing
    # and keeps its files; ``pause_keeps_memory`` says whether its processes (the interpreters' state) survive too.
    pause: bool = False
    pause_keeps_memory: bool = False


# What a checkpoint keeps: the box's files, or its files and its running processes' memory.
CheckpointKind = Literal["filesystem", "memory"]
CHECKPOINT_KINDS: tuple[CheckpointKind, ...] = ("filesystem", "memory")


def extra_reach(caps: Capabilities, hosts: tuple[str, ...]) -> tuple[str, ...]:
    """What a run with ``hosts`` can reach beyond them (``NetworkReach.extra``): nothing when it names no host."""
    if not hosts or caps.network_reach is None:
        return ()
    return caps.network_reach.extra


@attrs.frozen
class RunLimits:
    """The limits of one run, already lowered by the call and checked against the config."""

    timeout: float
    memory: int
    output: int
    files: int
    disk: int


NetworkPolicy: TypeAlias = Mapping[str, Any] | None
"""A driver's egress policy, as its ``mainsdk_network_policy`` hook translated a run's hosts.

Core calls the hook once per run or session, hands the result to the driver's start hook
(``BoxSpec.network_policy``), which starts the box with exactly that policy, and copies it into the
audit event. So it must be plain JSON-able data (mappings, lists, strings, numbers) holding no secret.
None: the driver has no policy to send.
"""


@attrs.frozen
class BoxSpec:
    """A box to start: its files, its environment and what it may reach."""

    id: str
    limits: RunLimits
    files: Mapping[str, bytes] = attrs.field(factory=dict)  # relative to the work folder
    env: Mapping[str, str] = attrs.field(factory=dict)
    hosts: tuple[str, ...] = ()
    # What ``mainsdk_network_policy`` returned for ``hosts``: start the box with exactly this policy.
    network_policy: NetworkPolicy = None
    idle: float | None = None  # sessions: close after this many idle seconds
    tenant: str = ""  # whose box it is: a driver that can reach a session from another process keeps it with the box
    # Pinned python packages (``name==version``, checked against ``sandbox.packages``) importable in the box. A
    # set the driver cannot build is MAIN-SANDBOX-0001 from start, naming the package, before any code runs.
    packages: tuple[str, ...] = ()
    # True for a session's box, where more commands are likely to follow; False for a one-shot run's box, which
    # runs one command and stops. A driver may prepare ahead for a session's next command, and skip that for a run.
    session: bool = False
    # Headers to set at the egress on requests to each host (``mainsdk.egress``), with the secrets' values
    # resolved: never put them in the box, a log, an error or a cassette. Each host is one of ``hosts`` (covered).
    egress: tuple[EgressRule, ...] = attrs.field(default=(), repr=False)
    # Start from this snapshot (``mainsdk_driver_snapshot``'s id) instead of an empty box: its files, then
    # ``files`` over them. Core sets it only on a driver whose ``checkpoint_kinds`` has the snapshot's kind.
    snapshot: str | None = None


@attrs.frozen
class FoundSnapshot:
    """What a driver knows of a snapshot another process made (``mainsdk_driver_find_snapshot``).

    ``kind``: one of ``CHECKPOINT_KINDS``; ``created``, ``expires``: seconds since the epoch (``expires`` None:
    kept until deleted); ``session_id``: the session it was taken from.
    """

    kind: str
    created: float
    expires: float | None
    session_id: str


class InputStream:
    """Bytes the app sends to a running command's stdin, in order, while it runs (a live stdin).

    The app calls ``send`` and ``close``; the driver iterates it (``async for chunk in command.input``) and
    writes each chunk to the command's stdin as it comes, after ``Command.stdin`` when that is set too, and
    closes the command's stdin when the iteration ends. A chunk the command can no longer take (it ended)
    is dropped. Only the app writes here: it is the channel nothing inside the box can forge into.
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called (chunks sent before it are still delivered)."""
        return self._closed

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the command's stdin; an error once closed."""
        if self._closed:
            raise RuntimeError("this input stream is closed")
        if data:
            self._queue.put_nowait(bytes(data))

    def close(self) -> None:
        """End the stream: the driver closes the command's stdin after the chunks already sent."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while (chunk := await self._queue.get()) is not None:
            yield chunk


@attrs.frozen
class Command:
    """A program and its arguments, never a shell line. ``program`` is a name like ``python3``.

    ``stdin`` is given whole before the command starts; ``input``, when set, keeps the command's stdin open
    for bytes the app sends while it runs (``InputStream``). A driver that declares ``Capabilities.cells``
    delivers ``input``; core sets it only on such drivers.
    """

    program: str
    args: tuple[str, ...] = ()
    stdin: bytes | None = None
    timeout: float = 30.0
    env: Mapping[str, str] = attrs.field(factory=dict)
    input: InputStream | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen
class ExecOutcome:
    """What a driver saw of one command. ``stop`` is set when the driver itself stopped it.

    ``signal`` is the signal that ended the command, when one did: its Linux number (``11``) or its name
    (``"SIGSEGV"``). Core turns it into ``exit_code = 128 + N`` and the name, as a shell would; the driver
    may leave ``exit_code`` None then.
    """

    exit_code: int | None
    stop: StopReason | None = None
    duration: float = 0.0
    hosts_refused: tuple[str, ...] = ()
    signal: int | str | None = None


@attrs.frozen
class OutFile:
    """A file the code left in the out folder. ``name`` is relative to it, in posix form."""

    name: str
    data: bytes


@attrs.frozen
class Collected:
    """The out folder of a box: its regular files up to the files limit, and what was left out."""

    files: tuple[OutFile, ...] = ()
    truncated: bool = False
    skipped: tuple[tuple[str, str], ...] = ()  # (name, why)


class OutputSink(Protocol):
    """Where a driver sends the command's output, chunk by chunk, as it arrives."""

    def stdout(self, data: bytes) -> None:
        """Take a chunk of standard output."""

    def stderr(self, data: bytes) -> None:
        """Take a chunk of standard error."""

    def host_refused(self, host: str) -> None:
        """Note that the code tried ``host``, which it was not given (MAIN-SANDBOX-0005; audited). Core's sinks also
        take ``why=``: the host was given, and this is why it was refused anyway (``it resolves to 10.0.0.5, ...``);
        a driver passes it only to a sink whose ``host_refused`` has that parameter."""


class Box(Protocol):
    """A started box, as a driver returns it. Core only reads ``id``."""

    @property
    def id(self) -> str:
        """The box's id, unique in this process."""


BoxT = TypeVar("BoxT", bound=Box)


class Driver(Protocol[BoxT]):
    """The hooks every driver implements, as types mypy checks: each method is also the hook's pluggy spec.

    This is the one place these hooks' signatures are written: ``mainsdk.hookspecs`` registers these
    methods as the specs pluggy calls, and core checks a driver when it is registered (each hook present
    and marked ``@hookimpl``, or a load-time ``MAIN-SANDBOX-0001`` naming the driver and the hook). An
    ``async def`` here is a hook core awaits, a plain ``def`` one it calls for its value (write it as a plain
    ``def``): the split is these declarations, checked at load. Annotate the entry point's factory as
    returning ``Driver[MyBox]`` (``SessionDriver[MyBox]`` with sessions) and a hook with a wrong name,
    argument or return type is a type error before anything runs. ``BoxT`` is the driver's own box type,
    which core hands back unchanged. A driver does not subclass this (pluggy finds hooks by name); a hook
    that takes fewer arguments than its spec, which pluggy allows, does not match it. The optional hooks
    are ``OptionalDriverHooks``.

    Hooks are called with keyword arguments only. Exactly one driver is registered with a sandbox's
    plugin manager, so each is ``firstresult``.
    """

    @hookspec(firstresult=True)
    def mainsdk_driver_capabilities(self) -> Capabilities:
        """Say what the driver can do (``Capabilities``). Called by core before every run, so it may probe lazily."""

    @hookspec(firstresult=True)
    async def mainsdk_driver_start(self, spec: BoxSpec) -> BoxT:
        """Start a box with ``spec.files`` in its work folder and ``spec.network_policy`` in force.

        Raise ``SandboxError(DRIVER_UNAVAILABLE)`` when the backend cannot be reached.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_exec(self, box: BoxT, command: Command, output: OutputSink) -> ExecOutcome:
        """Run ``command`` in ``box``, sending its output to ``output`` as it arrives.

        The driver enforces ``command.timeout`` and reports ``stop="timeout"`` (and
        ``"memory"`` when it killed the code at its memory limit). When the awaiting
        task is cancelled, the driver kills the command's whole process tree before
        re-raising: core cancels to enforce the output limit and its own deadline.
        A command must never be sent twice.

        Core judges every error escaping this hook as raised after the command may
        have been sent (``SandboxError.ran=None``, not retryable). Steps before the
        send (creating a backend box, uploading stdin) go through
        ``mainsdk.errors.before_command``, which says nothing ran, so an outage there
        stays retryable.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_collect(self, box: BoxT, max_bytes: int) -> Collected:
        """Return the regular files of the out folder, at most ``max_bytes`` in all, never following links."""

    @hookspec(firstresult=True)
    async def mainsdk_driver_stop(self, box: BoxT) -> None:
        """Stop the box and remove everything it held. Called always, also after errors and cancels."""


class SessionDriver(Driver[BoxT], Protocol[BoxT]):
    """A driver with sessions (``Capabilities.sessions``): the required hooks and the two a session needs."""

    @hookspec(firstresult=True)
    async def mainsdk_driver_write_file(self, box: BoxT, folder: Folder, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` in ``folder`` (``Folder.WORK`` or ``Folder.OUT``).

        ``path`` is relative to that folder and already checked by core: no leading ``/``, no empty, ``.`` or
        ``..`` segment, no NUL. Folders on the way are made; a file there is replaced, never written through.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_read_file(self, box: BoxT, folder: Folder, path: str) -> bytes:
        """Read ``path`` in ``folder`` (relative to it, checked by core as for ``write_file``).

        A path that is missing or not a regular file raises ``SandboxError(NO_SESSION)`` (404), not an outage.
        """


class OptionalDriverHooks(Protocol):
    """The driver hooks a driver may leave out, each also its pluggy spec (see ``Driver``).

    A driver does not need to match this protocol: an optional hook may take fewer arguments than here.
    """

    @hookspec(firstresult=True)
    def mainsdk_driver_check(self, command: Command, spec: BoxSpec) -> None:
        """Refuse ``command`` before anything starts, by raising ``SandboxError``.

        Called for every run before its box starts, and for every session command and
        cell before it is sent, so a refusal (a program the config does not permit is
        ``MAIN-SANDBOX-0001``) is audited as ``refused`` and nothing runs. ``spec`` is
        the plan of the box the command runs in: for a run, the box about to start
        (limits, files, hosts, the egress policy, packages); for a session, its box as
        it was started. A driver may refuse on either; it may also take ``command`` alone.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_reconnect(self, spec: BoxSpec) -> Box | None:
        """The running box of session ``spec.id`` that another process started, if it belongs to ``spec.tenant``.

        Called by ``sandbox.get(id)`` for a session this process does not hold
        (a web app's other worker). Return None when there is no such running
        box, or it is another tenant's: core then answers ``MAIN-SANDBOX-0008``,
        the same as for an unknown id. ``spec`` carries the id, the tenant and
        the limits of the ``main.yaml`` defaults, which the reconnected session
        uses (never more than the config allows). A driver without this hook
        keeps its sessions to the process that made them. A paused box may be
        returned too: ``mainsdk_driver_paused`` then says so, and core answers
        ``sandbox.get`` with the paused session's 0008 and ``sandbox.resume`` by resuming it.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_paused(self, box: Box) -> bool:
        """Whether ``box``, just returned by ``mainsdk_driver_reconnect``, is paused (another process paused it)."""

    @hookspec(firstresult=True)
    async def mainsdk_driver_find_snapshot(self, snapshot_id: str, tenant: str) -> FoundSnapshot | None:
        """Snapshot ``snapshot_id`` of ``tenant`` that another process made, when the driver keeps it where this
        process reaches it (a shared launcher); None otherwise: unknown, deleted, expired or another tenant's.

        Called by ``sandbox.create(snapshot=id)`` and ``sandbox.delete_snapshot(id)`` for an id this process
        does not know; core then keeps it as one of its own, without a name (that stays with its maker).
        """

    @hookspec(firstresult=True)
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> NetworkPolicy:
        """Translate the hosts a run may reach into the backend's egress policy (no hosts: nothing out).

        Core calls it once per run and per session, at the end of its plan, shows the result to the
        driver's check (``spec.network_policy`` of ``mainsdk_driver_check``), hands it to
        ``mainsdk_driver_start`` as ``spec.network_policy`` and copies it into the run's audit event, so
        an auditor sees what the backend was asked to enforce. The start hook enforces exactly that
        policy, never one recomputed from ``spec.hosts``. Return plain JSON-able data holding no secret.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_kernel_site(self, box: Box, language: str) -> str | None:
        """The in-box folder holding the cell kernel's own packages for ``language``, ready to import from.

        Core awaits it before it starts a cell interpreter of ``language`` in ``box`` (a session's first cell,
        and again after each restart: remember the box's answer). Return the absolute path, inside the box, of a
        folder holding ``KERNEL_PACKAGES[language]`` installed flat (``pip install --target`` layout), readable
        by the box's user, apart from the user's own site-packages and off the box's default ``sys.path``. Core
        sends it in the kernel's start line (``site``); the Python executor appends it to ``sys.path`` after
        the user's site-packages, so a user who pins ipython in ``sandbox.packages`` gets theirs. Return None
        for a language with no set: the kernel then runs without one (Python: plain cells, no IPython).

        Raise ``MAIN-SANDBOX-0001`` (nothing ran) when the box's interpreter cannot take the set, naming it,
        and ``MAIN-SANDBOX-0006`` (``ran=False``) for an outage while getting the set into the box.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_snapshot(self, box: Box, snapshot_id: str, kind: str) -> float | None:
        """Keep ``box``'s state of ``kind`` (one of ``Capabilities.checkpoint_kinds``) as snapshot ``snapshot_id``.

        Core calls it with no command running in the box that core started (for "filesystem" it ended the
        session's interpreters and background processes first). The snapshot holds what the box holds, never a
        secret value or egress credential of core's (those are per command, and bound again from their names at
        each start). The box goes on running. Return when the snapshot expires (seconds since the epoch) or None.
        A box started with ``BoxSpec.snapshot`` gets its files; a deleted snapshot must still serve boxes already
        started from it.
        """

    @hookspec(firstresult=True)
    async def mainsdk_driver_delete_snapshot(self, snapshot_id: str) -> None:
        """Forget snapshot ``snapshot_id``: no new box starts from it; its storage goes once no box uses it."""

    @hookspec(firstresult=True)
    async def mainsdk_driver_pause(self, box: Box) -> None:
        """Stop everything in ``box`` from running, keeping its files (and its memory where the driver says so)."""

    @hookspec(firstresult=True)
    async def mainsdk_driver_resume(self, box: Box) -> None:
        """Let a paused ``box`` run again, as it was paused. Resuming a box that runs is a no-op."""

    @hookspec
    def mainsdk_driver_shutdown(self) -> None:
        """Release what the driver holds for the whole process (helper processes, clients). May be called twice."""


# The cell kernel's own packages, by language (``mainsdk_driver_kernel_site``): for Python, ipython 9 and its whole
# dependency closure for CPython 3.11+ on Linux, each pinned exactly (the set is closed: install it with
# ``--no-deps``), and pip, which ``%pip install`` runs where the box's own is hidden or absent.
KERNEL_PACKAGES: Mapping[str, tuple[str, ...]] = {
    "python": (
        "asttokens==3.0.2", "executing==2.3.0", "ipython==9.18.1", "ipython-pygments-lexers==1.1.1",
        "jedi==0.20.1", "matplotlib-inline==0.2.2", "parso==0.8.7", "pexpect==4.9.0", "pip==26.3",
        "prompt-toolkit==3.0.53", "psutil==7.2.2", "ptyprocess==0.7.0", "pure-eval==0.2.4", "pygments==2.21.0",
        "stack-data==0.6.3", "traitlets==5.16.1", "typing-extensions==4.16.0", "wcwidth==0.9.4",
    ),
}  # fmt: skip


DriverEntryPoint = Callable[..., object]
"""What a ``mainsdk.drivers`` entry point names: ``factory(config)`` or ``factory(config, *, secret=resolver)``.

Core calls it with the parsed ``AppConfig`` (and the app's secret resolver when the factory takes a
``secret`` keyword) and registers what it returns as the driver plugin. The conformance suite's
``DriverFromConfig`` is the narrower ``(config) -> driver`` a test target gives.
"""
