"""What a driver's conftest hands the suite, and how the suite builds sandboxes from it.

A driver's conftest defines one fixture, ``conformance_target``, returning a
``ConformanceTarget``: the driver id, how to build the driver from a parsed
``main.yaml``, what to add to every ``main.yaml`` the suite writes, and the
tests known to fail. The suite writes a ``main.yaml`` per test, builds a real
``mainsdk.Sandbox`` on the driver and runs real code in it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
from mainsdk import AsyncSandbox, Capabilities, Sandbox, SandboxDeps
from mainsdk.audit import AuditEvent
from mainsdk.config import AppConfig, load_config_text
from mainsdk.driver import BoxSpec
from mainsdk.hookspecs import hookimpl

DriverFromConfig = Callable[[AppConfig], object]
"""How a test target builds its driver: from the parsed ``main.yaml`` alone, to the driver plugin.

Narrower than core's ``mainsdk.driver.DriverEntryPoint`` (what a ``mainsdk.drivers`` entry point names,
which may also take the app's secret resolver): the suite resolves secrets itself.
"""

# Secret names every suite main.yaml lists, and the values the suite's resolver gives.
SECRET = "CONFORMANCE_SECRET"
OTHER_SECRET = "CONFORMANCE_OTHER_SECRET"
UNSET_SECRET = "CONFORMANCE_UNSET_SECRET"
SECRET_VALUES = {SECRET: "tok-9f8e7d6c5b4a-conformance", OTHER_SECRET: "tok-1a2b3c4d5e6f-other"}

# The egress tests' TLS origin (``conformance_egress_origin``) shows a certificate for the suite's host names
# (``NetworkHosts``) from this test CA, made once for the suite (its key is in the package: a test key, trusted by
# nothing but a driver told to). A driver that checks the real server's certificate when it sets egress headers
# (the local driver's proxy) is given it as its test trust, as it is given ``resolve`` for the names.
DATA = Path(__file__).parent / "data"
EGRESS_ORIGIN_CA = (DATA / "egress-origin-ca.pem").read_text()


@attrs.frozen
class NetworkHosts:
    """Hosts the network tests use. Only a driver with ``capabilities.network`` is given them.

    They are names under ``.test`` (RFC 6761), which no resolver answers, so a
    test never reaches anything but this machine: a driver run live maps them
    to 127.0.0.1 for its own egress alone (the local driver's ``resolve=``),
    where the suite's origin server listens; a replayed driver only sends them
    in its egress policy. ``allowed`` is given to a run; ``denied`` is in
    ``network.allow`` but not given; ``wildcard`` is given as a pattern and
    ``under_wildcard`` must then be reachable.
    """

    allowed: str = "allowed.conformance.test"
    denied: str = "denied.conformance.test"
    wildcard: str = "*.wild.conformance.test"
    under_wildcard: str = "api.wild.conformance.test"

    def names(self) -> tuple[str, ...]:
        """Every concrete name the tests try, for a driver's loopback mapping."""
        return (self.allowed, self.denied, self.under_wildcard)


@attrs.frozen
class ConformanceTarget:
    """How the suite reaches one driver. Return it from the ``conformance_target`` fixture.

    ``driver_id``: the id ``main.yaml`` names (``sandbox.driver``).
    ``driver``: builds the driver plugin from the parsed config; None loads it
    through its ``mainsdk.drivers`` entry point, as an app would.
    ``config``: merged into every ``main.yaml`` the suite writes (for example
    ``{"permissions": {"processes": ["python3"]}}``).
    ``expected_failures``: ``{"TestClass::test_name": "why"}``; each is run
    and marked xfail(strict), so a fix is reported when it starts passing.
    ``baseline_env``: variable names the box itself sets (``PATH`` on a login
    shell, ``LC_CTYPE`` from Python's locale coercion), holding no app value.
    ``unavailable``: builds the driver pointed at a backend that is down, for
    the MAIN-SANDBOX-0006 test; None skips it.
    ``hosts``: the hosts the network tests use.
    ``absent_clients``: ``{"httpx": "why"}``, HTTP clients (``suite._helpers.CLIENTS``) the driver's box image
    truly lacks, said with the image's source; the egress test of each is skipped with that reason. Every other
    client must be in the box and reach an egress host trusting only what the box trusts.
    """

    driver_id: str
    driver: DriverFromConfig | None = None
    config: Mapping[str, Any] = attrs.field(factory=dict)
    expected_failures: Mapping[str, str] = attrs.field(factory=dict)
    baseline_env: frozenset[str] = frozenset({"LC_CTYPE"})
    unavailable: DriverFromConfig | None = None
    hosts: NetworkHosts = attrs.field(factory=NetworkHosts)
    absent_clients: Mapping[str, str] = attrs.field(factory=dict)


class StartSpy:
    """A plugin that sees every box start, so a test can prove that a refused call started nothing."""

    def __init__(self) -> None:
        self.started: list[BoxSpec] = []

    @hookimpl(tryfirst=True)
    def mainsdk_driver_start(self, spec: BoxSpec) -> None:
        # Returning None lets the firstresult call go on to the driver.
        self.started.append(spec)


@attrs.define
class Built:
    """A sandbox built for one test, with the audit events it emitted and the boxes it started."""

    sandbox: Sandbox
    events: list[AuditEvent]
    spy: StartSpy
    config_text: str

    @property
    def started(self) -> list[BoxSpec]:
        """The boxes started so far (their specs)."""
        return self.spy.started


def merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """A deep merge of two config mappings; ``extra`` wins, lists are replaced."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def base_config(target: ConformanceTarget) -> dict[str, Any]:
    """The ``main.yaml`` every suite test starts from, before the target's and the test's additions."""
    hosts = target.hosts
    listed = [hosts.allowed, hosts.denied, hosts.wildcard]
    return {
        "sandbox": {
            "driver": target.driver_id,
            "limits": {"timeout": "10s", "memory": "256MB", "output": "1MB", "files": "1MB"},
            "network": listed,
            "secrets": [SECRET, OTHER_SECRET, UNSET_SECRET],
        },
        "network": {"allow": listed},
    }


class Conformance:
    """The suite's builder: sandboxes on the target's driver, from a ``main.yaml`` it writes per test."""

    def __init__(self, target: ConformanceTarget, folder: Path, *, replayed: bool) -> None:
        self.target = target
        self.folder = folder
        self.replayed = replayed
        self.replay: Any = None  # the test's ReplayServer when the driver is replayed
        self._built: list[Built] = []

    @property
    def driver_id(self) -> str:
        """The driver under test."""
        return self.target.driver_id

    def config_text(self, extra: Mapping[str, Any] | None = None) -> str:
        """The ``main.yaml`` text for a test: the base, the target's config, then ``extra``.

        JSON is YAML, and keeps the text exact and the key order as written.
        """
        data = merge(merge(base_config(self.target), self.target.config), extra or {})
        return json.dumps(data, indent=2) + "\n"

    def load(self, extra: Mapping[str, Any] | None = None) -> tuple[AppConfig, str]:
        """Write the test's ``main.yaml`` and parse it as an app would."""
        text = self.config_text(extra)
        path = self.folder / "main.yaml"
        path.write_text(text)
        return load_config_text(text, source=path), text

    def deps(
        self,
        config: AppConfig,
        events: list[AuditEvent],
        spy: StartSpy,
        factory: DriverFromConfig | None = None,
        **deps: Any,
    ) -> SandboxDeps:
        """The ``SandboxDeps`` of a suite sandbox: the driver, the suite's secrets, an audit list, the spy."""
        factory = factory or self.target.driver
        driver = factory(config) if factory is not None else None
        deps.setdefault("secret", SECRET_VALUES.get)
        # load_entrypoints=False: the app's audit sinks stay out of the suite; the driver still loads by id.
        return SandboxDeps(
            config=config, driver=driver, log=events.append, plugins=[spy], load_entrypoints=False, **deps
        )

    def build(
        self, extra: Mapping[str, Any] | None = None, *, factory: DriverFromConfig | None = None, **deps: Any
    ) -> Built:
        """A synchronous sandbox for this test, closed when the test ends.

        ``extra`` is merged into the ``main.yaml``; ``deps`` go to ``SandboxDeps``
        (``tenancy``, ``environment``, ``secret``, ``agents``, ``access``).
        """
        config, text = self.load(extra)
        events: list[AuditEvent] = []
        spy = StartSpy()
        built = Built(Sandbox(self.deps(config, events, spy, factory, **deps)), events, spy, text)
        self._built.append(built)
        return built

    def sandbox(self, extra: Mapping[str, Any] | None = None, **deps: Any) -> Sandbox:
        """Just the sandbox of ``build``."""
        return self.build(extra, **deps).sandbox

    def async_sandbox(
        self, extra: Mapping[str, Any] | None = None, **deps: Any
    ) -> tuple[AsyncSandbox, list[AuditEvent]]:
        """An ``AsyncSandbox`` for the running event loop; the caller awaits ``aclose()``."""
        config, _ = self.load(extra)
        events: list[AuditEvent] = []
        return AsyncSandbox(self.deps(config, events, StartSpy(), **deps)), events

    def capabilities(self) -> Capabilities:
        """What the driver declares, read the way core reads it: from ``sandbox.capabilities()``."""
        built = self.build()
        return built.sandbox.capabilities()

    def close(self) -> None:
        """Release every sandbox built for the test."""
        while self._built:
            self._built.pop().sandbox.close()


def iter_strings(value: object) -> Iterator[str]:
    """Every string inside a nested structure of mappings, sequences and attrs values."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_strings(key)
            yield from iter_strings(item)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from iter_strings(item)
    elif attrs.has(type(value)):
        yield from iter_strings(attrs.asdict(value))  # type: ignore[arg-type]
