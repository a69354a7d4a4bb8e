"""The pytest plugin a driver's test run opts into.

In the driver's ``conftest.py``::

    pytest_plugins = ["mainsdk_conformance.plugin"]

    @pytest.fixture
    def conformance_target() -> ConformanceTarget:
        return ConformanceTarget(driver_id="mydriver", driver=my_driver_from_config)

and in a test module ``from mainsdk_conformance.suite import *``. The plugin
skips a test whose capability the driver does not declare (saying which),
marks the target's expected failures xfail(strict), refuses a test module that
overrides a suite test, runs the replay server of a replayed driver, rewrites the
suite's asserts so a failure shows the values compared, and gives each suite test
a watchdog (``--conformance-timeout``, default 120 s): a hanging driver fails the
test with every thread's stack instead of hanging CI.
"""

from __future__ import annotations

import contextlib
import http.server
import importlib.resources
import os
import random
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import traceback
import warnings
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

# Before the suite's modules are imported (the import of _helpers below, or a driver's star-import), so its
# asserts are rewritten: a third party's failure shows the compared values. The package does it too.
pytest.register_assert_rewrite("mainsdk_conformance.suite")

from mainsdk import Capabilities  # noqa: E402

from mainsdk_conformance.cassette import hand_set, keep_on_record  # noqa: E402
from mainsdk_conformance.marks import (  # noqa: E402
    CAPABILITY_FLAGS,
    CELLS_LANGUAGE,
    CHECKPOINT,
    LIVE,
    MEMORY_LIMIT_TREE,
    REPLAY,
    UNAVAILABLE,
)
from mainsdk_conformance.suite._helpers import ORIGIN_BODY  # noqa: E402
from mainsdk_conformance.target import DATA, Conformance, ConformanceTarget  # noqa: E402

REPLAY_KEY = pytest.StashKey[Any]()
CAPS_KEY = pytest.StashKey[dict[str, Capabilities]]()
REPORTED_KEY = pytest.StashKey[bool]()
PASSED_KEY = pytest.StashKey[bool]()
DEFAULT_TIMEOUT = 120.0  # seconds per phase of a suite test; the slowest suite tests take a few seconds


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options: record mode and where it forwards to."""
    group = parser.getgroup("mainsdk-conformance")
    group.addoption(
        "--conformance-record",
        action="store_true",
        default=False,
        help="record cassettes: forward the driver's requests to the real provider and write what it answers",
    )
    group.addoption(
        "--conformance-upstream",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="in record mode, forward upstream NAME to URL instead of the profile's provider address",
    )
    group.addoption(
        "--conformance-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"fail a suite test whose setup, call or teardown runs longer (default: the conformance_timeout "
        f"ini value, else {DEFAULT_TIMEOUT:g}); 0 turns the watchdog off",
    )
    parser.addini(
        "conformance_timeout",
        f"seconds a conformance suite test's phase may run before its watchdog fails it (default {DEFAULT_TIMEOUT:g})",
        default=str(DEFAULT_TIMEOUT),
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers (the repo runs with --strict-markers)."""
    config.addinivalue_line(
        "markers", "conformance_requires(*needs): a conformance test needing capabilities; skipped without them"
    )
    config.stash[CAPS_KEY] = {}


def _suite_classes() -> tuple[type, ...]:
    from mainsdk_conformance import suite

    return suite.SUITE_CLASSES


def _defining_suite_class(cls: type, name: str) -> type | None:
    """The suite class that defines test ``name`` for ``cls`` (a suite class or a subclass of one)."""
    suite = _suite_classes()
    for base in cls.__mro__:
        if base in suite and name in base.__dict__:
            return base
    return None


def suite_test_ids() -> set[str]:
    """Every test of the suite, as ``TestClass::test_name``."""
    return {f"{cls.__name__}::{name}" for cls in _suite_classes() for name in vars(cls) if name.startswith("test_")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a suite test overridden in a subclass: an empty override would report a pass for nothing."""
    for item in items:
        cls = getattr(item, "cls", None)
        name = getattr(item, "originalname", None)
        if cls is None or name is None:
            continue
        owner = _defining_suite_class(cls, name)
        if owner is not None and getattr(cls, name) is not owner.__dict__[name]:
            raise pytest.UsageError(
                f"{item.nodeid} overrides the conformance test {owner.__name__}::{name}; do not override suite "
                f"tests: declare it in ConformanceTarget.expected_failures with the reason, and it runs as xfail"
            )


def _no_checkpoints(driver: str) -> str:
    return f"the driver declares no checkpoint kinds (driver {driver}, Capabilities.checkpoint_kinds)"


def _missing(
    need: str, caps: Capabilities, target: ConformanceTarget, replayed: bool, recording: bool = False
) -> str | None:
    """Why the driver cannot take a test needing ``need``, or None when it can."""
    driver = target.driver_id
    if need in ("pause", "pause_keeps_memory") and not getattr(caps, need) and not caps.checkpoint_kinds:
        return _no_checkpoints(driver)
    if need in CAPABILITY_FLAGS:
        return None if getattr(caps, need) else f"driver {driver} declares no {need}"
    if need == MEMORY_LIMIT_TREE:
        if caps.memory_limit_scope == "tree":
            return None
        if caps.memory_limit_scope == "process":
            return f"driver {driver} declares its memory limit per process (RLIMIT_AS), not for the whole tree"
        return f"driver {driver} does not declare that its memory limit holds for the whole process tree"
    if need.startswith("language:"):
        language = need.split(":", 1)[1]
        return None if language in caps.languages else f"driver {driver} declares no language {language}"
    if need.startswith(CHECKPOINT):
        kind = need.removeprefix(CHECKPOINT)
        if kind in caps.checkpoint_kinds:
            return None
        if not caps.checkpoint_kinds:
            return _no_checkpoints(driver)
        why = f": {caps.checkpoint_why}" if caps.checkpoint_why else ""  # the driver's own word on what it found
        return f"driver {driver} declares no {kind!r} checkpoints (Capabilities.checkpoint_kinds){why}"
    if need.startswith(CELLS_LANGUAGE):
        language = need.removeprefix(CELLS_LANGUAGE)
        if language in caps.cells_languages:
            return None
        return f"driver {driver} declares no cells in {language} (Capabilities.cells_languages)"
    if need == REPLAY:
        if recording:
            # A provider cannot be made to fail on cue: fault cassettes are authored, and recording keeps them.
            return "recording: this test replays an authored fault cassette, which recording keeps as it is"
        return None if replayed else f"driver {driver} is not replayed from cassettes; this test needs a fault cassette"
    if need == LIVE:
        return f"driver {driver} is replayed; this test needs the driver live on this host" if replayed else None
    if need == UNAVAILABLE:
        if target.unavailable is None:
            return f"driver {driver} declares no unavailable backend (ConformanceTarget.unavailable)"
        return None
    raise ValueError(f"unknown conformance requirement {need!r}")


@pytest.fixture
def conformance(
    request: pytest.FixtureRequest, conformance_target: ConformanceTarget, tmp_path: Path
) -> Iterator[Conformance]:
    """The suite's builder for this test: sandboxes on the target's driver, closed when the test ends."""
    replayed = "conformance_replay" in request.fixturenames
    builder = Conformance(conformance_target, tmp_path, replayed=replayed)
    if replayed:
        builder.replay = request.getfixturevalue("conformance_replay")
    yield builder
    builder.close()


# The origin's port when the driver is replayed: the code's text (which names it) must match the cassette.
REPLAYED_ORIGIN_PORT = 8080


class _Origin(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ORIGIN_BODY: proof that a request reached the suite's loopback origin."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(ORIGIN_BODY)))
        self.end_headers()
        self.wfile.write(ORIGIN_BODY)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def conformance_origin_port(request: pytest.FixtureRequest, conformance: Conformance) -> Iterator[int]:
    """The port of the origin the network tests reach, on 127.0.0.1 of this machine (never anywhere else).

    Replayed, nothing is served: the cassette answers, and the code names the
    port the recording served on (``meta.origin_port``; 8080 for authored
    cassettes that name none). Live and while recording, a real origin
    answers; a recording notes its port, so replay sends the same code.
    """
    recording = _recording(request.config)
    if conformance.replayed and not recording:
        meta = conformance.replay.cassette.meta if conformance.replay is not None else {}
        yield int(meta.get("origin_port") or REPLAYED_ORIGIN_PORT)
        return
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = int(server.server_address[1])
    if recording and conformance.replay is not None:
        conformance.replay.cassette.meta["origin_port"] = port
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# The port of the origin over TLS when the driver is replayed, for drivers that filter https on any port.
REPLAYED_TLS_ORIGIN_PORT = 8443


@pytest.fixture(scope="session")
def _conformance_origin_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate for the TLS origin (the network tests check reach, not trust)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl on this machine to make the TLS origin's certificate")
    folder = tmp_path_factory.mktemp("origin-tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=conformance.test"]
    subprocess.run(
        [openssl, *request, "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
def conformance_tls_origin_port(conformance: Conformance, request: pytest.FixtureRequest) -> Iterator[int]:
    """The port of the same origin over TLS (https), on 127.0.0.1 of this machine.

    Replayed, the port the recording served on (``meta.tls_origin_port``; 8443
    for authored cassettes that name none); while recording, a real one, noted.
    """
    recording = _recording(request.config)
    if conformance.replayed and not recording:
        meta = conformance.replay.cassette.meta if conformance.replay is not None else {}
        yield int(meta.get("tls_origin_port") or REPLAYED_TLS_ORIGIN_PORT)
        return
    cert, key = request.getfixturevalue("_conformance_origin_certificate")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Origin)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    if recording and conformance.replay is not None:
        conformance.replay.cassette.meta["tls_origin_port"] = int(server.server_address[1])
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class EgressOrigin:
    """The egress tests' HTTPS origin on 127.0.0.1: its port, and the headers of each request, by the Host named."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[tuple[str, str]]]] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keeps connections open, as an API does

            def do_GET(self) -> None:
                seen.append(((self.headers.get("Host") or "").split(":")[0], list(self.headers.items())))
                self.send_response(200)
                self.send_header("Content-Length", str(len(ORIGIN_BODY)))
                self.end_headers()
                self.wfile.write(ORIGIN_BODY)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(DATA / "egress-origin.pem", DATA / "egress-origin.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def values(self, host: str, header: str) -> list[list[str]]:
        """The values of ``header`` (any case, repeats kept) in each request that named ``host``."""
        return [[v for n, v in headers if n.lower() == header.lower()] for named, headers in self.seen if named == host]

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@pytest.fixture
def conformance_egress_origin() -> Iterator[EgressOrigin]:
    """An HTTPS origin on 127.0.0.1 whose certificate names the suite's hosts, from ``EGRESS_ORIGIN_CA``.

    For the live egress tests: it records the headers each request carried, so a test sees what the driver's
    egress sent, and what it did not.
    """
    origin = EgressOrigin()
    try:
        yield origin
    finally:
        origin.close()


@pytest.fixture
def conformance_capabilities(request: pytest.FixtureRequest, conformance: Conformance) -> Capabilities:
    """What the driver declares, read once per driver per test run through ``sandbox.capabilities()``."""
    cache = request.config.stash[CAPS_KEY]
    if conformance.driver_id not in cache:
        cache[conformance.driver_id] = conformance.capabilities()
    return cache[conformance.driver_id]


@pytest.fixture(autouse=True)
def _conformance_gate(request: pytest.FixtureRequest) -> None:
    """Before a suite test: skip it for a missing capability, or mark it as an expected failure."""
    cls = request.cls
    name = getattr(request.node, "originalname", request.node.name)
    owner = _defining_suite_class(cls, name) if cls is not None else None
    if owner is None:
        return
    target: ConformanceTarget = request.getfixturevalue("conformance_target")
    unknown = sorted(set(target.expected_failures) - suite_test_ids())
    if unknown:
        pytest.fail(
            f"ConformanceTarget.expected_failures names {', '.join(unknown)}, not tests of the suite; "
            "use TestClass::test_name as the suite spells it",
            pytrace=False,
        )
    builder: Conformance = request.getfixturevalue("conformance")
    caps: Capabilities = request.getfixturevalue("conformance_capabilities")
    needs = [need for marker in request.node.iter_markers("conformance_requires") for need in marker.args]
    if not any(need.startswith("language:") for need in needs):
        # A suite test runs python unless it names its language: a driver declaring none skips it too.
        needs.insert(0, "language:python")
    for need in needs:
        reason = _missing(need, caps, target, builder.replayed, _recording(request.config))
        if reason is not None:
            pytest.skip(reason)
    key = f"{owner.__name__}::{name}"
    if key in target.expected_failures:
        reason = f"expected to fail on driver {target.driver_id}: {target.expected_failures[key]}"
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


# --- Replay --------------------------------------------------------------------------------------------------------


@pytest.fixture
def conformance_profile() -> Any:
    """The provider profile of a replayed driver (``mainsdk_conformance.profiles``); its conftest overrides this."""
    raise pytest.UsageError(
        "conformance_replay needs a conformance_profile fixture in your conftest, returning a "
        "mainsdk_conformance.profiles.Profile (E2B, VERCEL, or your own)"
    )


@pytest.fixture
def conformance_cassette_dir(request: pytest.FixtureRequest) -> Path:
    """Where the cassettes live: ``cassettes/`` beside the test module. Override it to keep them elsewhere."""
    return Path(request.node.path).parent / "cassettes"


def cassette_name(item: pytest.Item) -> str:
    """The cassette of a test: ``TestClass/test_name.json`` for a suite test, else ``module/test_name.json``."""
    cls = getattr(item, "cls", None)
    name = getattr(item, "originalname", item.name)
    owner = _defining_suite_class(cls, name) if cls is not None else None
    folder = owner.__name__ if owner is not None else (cls.__name__ if cls is not None else Path(item.path).stem)
    suffix = item.name[len(name) :]  # a parametrized test keeps its [id]
    return f"{folder}/{name}{suffix}.json"


@pytest.fixture
def conformance_replay(
    request: pytest.FixtureRequest, conformance_profile: Any, conformance_cassette_dir: Path
) -> Iterator[Any]:
    """The test's replay server on loopback, answering from its cassette; point the driver at ``server.url(name)``.

    With ``--conformance-record`` it forwards to the real provider instead and
    writes the cassette, scrubbed, when the test ends.
    """
    from mainsdk_conformance.replay import ReplayServer, parse_upstreams
    from mainsdk_conformance.target import SECRET_VALUES

    path = conformance_cassette_dir / cassette_name(request.node)
    rechecked: list[str] = []
    if _recording(request.config):
        kept = keep_on_record(path)
        if kept is not None:
            pytest.skip(f"recording keeps the cassette: {kept}")
        rechecked = hand_set(path)  # recorded again: the live run must pass the test as the hand-set answers did
        upstreams = parse_upstreams(request.config.getoption("conformance_upstream"))
        secrets = [os.environ[name] for name in conformance_profile.credential_env if os.environ.get(name)]
        # The suite's secrets, marked by name where a create gives them to the provider's egress (secret_fields).
        server = ReplayServer.recorder(
            conformance_profile, path, upstreams=upstreams, secrets=secrets, known=SECRET_VALUES
        )
    else:
        server = ReplayServer.replayer(conformance_profile, path, known=SECRET_VALUES)
    server.start()
    request.node.stash[REPLAY_KEY] = server
    try:
        with seeded_cell_tokens(cassette_name(request.node)):
            yield server
    finally:
        server.stop()
    # Only a test that passed is a recording worth keeping: a failed or skipped one would replace a good
    # cassette with what went wrong, or with nothing.
    passed = request.node.stash.get(PASSED_KEY, False)
    if server.recording and passed and server.cassette.interactions:
        if rechecked:
            server.cassette.meta["rechecked"] = rechecked  # the hand-set answers this live recording replaced
        server.save()
    elif server.recording and rechecked:
        # The flag: the live provider did not give what was set by hand, and the authored cassette stays as it was.
        warnings.warn(
            pytest.PytestWarning(
                f"{path.name}: the live run did not reproduce what was set by hand ({'; '.join(rechecked)}); "
                "the authored cassette is kept: review it against the provider"
            ),
            stacklevel=1,
        )
    problems = server.problems(final=True)
    # A test that already failed on a request the cassette lacks is not failed twice for what followed from it.
    if problems and not request.node.stash.get(REPORTED_KEY, False):
        pytest.fail("\n".join(problems), pytrace=False)


class _SeededTokens:
    """``secrets.token_hex`` from a generator seeded by the test, for cells' ids, folders and frame tokens."""

    def __init__(self, seed: str) -> None:
        self._random = random.Random(seed)

    def token_hex(self, nbytes: int = 32) -> str:
        """``nbytes`` bytes as hex, the same sequence on every run of the same test."""
        return self._random.randbytes(nbytes).hex()


@contextlib.contextmanager
def seeded_cell_tokens(seed: str) -> Iterator[None]:
    """While a replayed (or recorded) test runs, cells draw their random tokens from a generator seeded by ``seed``.

    A cell's frames carry a token the app makes per interpreter (``mainsdk.cells``), sent as the kernel's first
    stdin line: a replayed stream can only answer the app that sent the same one, so the recording and each
    replay draw the same sequence. Outside replay (a live driver) they stay random.
    """
    from mainsdk import cells

    kept = vars(cells)["token"]
    setattr(cells, "token", _SeededTokens(seed))  # noqa: B010 - a module global cells does not export
    try:
        yield
    finally:
        setattr(cells, "token", kept)  # noqa: B010


def _recording(config: pytest.Config) -> bool:
    return bool(config.getoption("conformance_record"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Note whether the test itself passed, for record mode (which saves only passing tests' cassettes)."""
    report = yield
    if report.when == "call":
        item.stash[PASSED_KEY] = report.passed
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Fail the test itself, not only its teardown, when its driver sent a request the cassette does not have.

    The call runs under the test's watchdog too.
    """
    try:
        with _Watchdog(item, "call"):
            result = yield
    except BaseException as exc:
        server = item.stash.get(REPLAY_KEY, None)
        problems = server.problems(final=False) if server is not None else []
        if problems:
            item.stash[REPORTED_KEY] = True
            raise AssertionError("\n".join(problems)) from exc
        raise
    server = item.stash.get(REPLAY_KEY, None)
    problems = server.problems(final=False) if server is not None else []
    if problems:
        item.stash[REPORTED_KEY] = True
        raise AssertionError("\n".join(problems))
    return result


# --- Watchdog ------------------------------------------------------------------------------------------------------


class WatchdogTimeout(Exception):
    """A suite test ran past its watchdog: the driver under test hangs (or is far slower than the suite allows)."""


def watchdog_seconds(config: pytest.Config) -> float:
    """The watchdog of each phase of a suite test, in seconds (0: off)."""
    option = config.getoption("conformance_timeout")
    return float(option if option is not None else config.getini("conformance_timeout"))


def _stacks() -> str:
    """Every thread's stack, so the failure shows where the driver hangs (often its event loop's thread)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f"--- thread {names.get(ident, ident)} ---\n" + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Watch a suite test's setup (its fixtures read the driver's capabilities)."""
    with _Watchdog(item, "setup"):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """Watch a suite test's teardown (its sandboxes close and their boxes stop)."""
    with _Watchdog(item, "teardown"):
        return (yield)


class _Watchdog:
    """Arm SIGALRM for one phase of a suite test: past the limit, raise in the main thread where the test waits.

    A signal, not a thread: only an exception raised in the test's own thread fails the test with a traceback
    at the point it hangs. Where SIGALRM is missing (Windows) or the test is not on the main thread, the
    phase is not watched.
    """

    def __init__(self, item: pytest.Item, phase: str) -> None:
        cls = getattr(item, "cls", None)
        name = getattr(item, "originalname", item.name)
        watched = cls is not None and _defining_suite_class(cls, name) is not None
        self.seconds = watchdog_seconds(item.config) if watched else 0.0
        self.phase = phase
        self.nodeid = item.nodeid
        self.previous: Any = None
        self.armed = (
            self.seconds > 0 and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
        )

    def _fire(self, signum: int, frame: Any) -> None:
        raise WatchdogTimeout(
            f"{self.nodeid}: its {self.phase} ran past the conformance watchdog ({self.seconds:g} s); the driver "
            f"hangs. Raise it with --conformance-timeout or the conformance_timeout ini value if the driver is just "
            f"slow. Every thread's stack when it fired:\n{_stacks()}"
        )

    def __enter__(self) -> None:
        if self.armed:
            self.previous = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.previous)


EDITED_COMMENT = "  (a comment edited by the cassette check: no cassette may change; this run's edit: "


@contextlib.contextmanager
def kernel_with_an_edited_comment(folder: Path) -> Iterator[str]:
    """While it is open, core's cell kernel is a copy of its package in ``folder`` with one comment edited.

    The first comment line of ``supervisor.py`` and of ``loader.py`` gets ``EDITED_COMMENT`` and a random word
    appended, another at every run, so no run replays the kernel its cassettes were recorded with. The loader
    checks the package's hash, so the kernel that runs (and is delivered, ``mainsdk.kernel_start``) is the edited
    one. A suite run inside it proves every cassette matches the kernel by content (``cassette.known_payloads``),
    never by its bytes. Yields the edited line of ``supervisor.py``.
    """
    from mainsdk import kernel_start

    source = Path(str(importlib.resources.files("mainsdk.kernel")))
    copy = folder / "kernel"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    edit = f"{EDITED_COMMENT}{random.SystemRandom().getrandbits(64):016x})"
    edited = []
    for name in ("supervisor.py", "loader.py"):
        module = copy / name
        lines = module.read_text("utf-8").split("\n")
        index = next(i for i, line in enumerate(lines) if line.lstrip().startswith("# "))
        lines[index] += edit
        module.write_text("\n".join(lines), "utf-8")
        edited.append(lines[index])
    files = {
        path.name: path.read_text("utf-8")
        for path in sorted(copy.iterdir())
        if path.is_file() and path.name.endswith(kernel_start.SUFFIXES)
    }
    kept = kernel_start.kernel_files
    setattr(kernel_start, "kernel_files", lambda: files)  # noqa: B010 - a module global read at each call
    try:
        yield edited[0]
    finally:
        setattr(kernel_start, "kernel_files", kept)  # noqa: B010
