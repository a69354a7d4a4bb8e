"""Sandboxes on the real local driver, built from a main.yaml text, with their audit events captured."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from loopback import DATA, LOOPBACK_NAME, NETWORK_CONFIG, RESOLVE, LoopbackServer
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk_local.config import LocalPrograms

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  local: { python: python3, node: node, bash: bash }
  limits: { timeout: 10s, memory: 256MB, output: 1MB }
  secrets: [TEST_API_KEY]
permissions:
  processes: [python3, node, bash]
  disk: { temp: { max: 64MB } }
"""


class Built:
    """A sandbox and the audit events it emitted."""

    def __init__(self, sandbox: Sandbox, events: list[AuditEvent]) -> None:
        self.sandbox = sandbox
        self.events = events


@pytest.fixture
def make_sandbox(tmp_path: Path) -> Iterator[Callable[..., Built]]:
    """Build a synchronous sandbox from a main.yaml text (default: CONFIG) on the real local driver."""
    built: list[Sandbox] = []

    def make(text: str = CONFIG, **deps: Any) -> Built:
        config_file = tmp_path / "main.yaml"
        config_file.write_text(text)
        config = load_config_text(text, source=config_file)
        events: list[AuditEvent] = []
        driver = deps.pop("driver", None) or local_sandbox_driver(
            permissions=config.permissions,
            programs={
                "python": config.sandbox.section("local", LocalPrograms).python,
                "node": config.sandbox.section("local", LocalPrograms).node,
                "bash": config.sandbox.section("local", LocalPrograms).bash,
            },
        )
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver, log=events.append, load_entrypoints=False, **deps))
        built.append(sandbox)
        return Built(sandbox, events)

    yield make
    for sandbox in built:
        sandbox.close()


@pytest.fixture
def local_config() -> str:
    """The main.yaml text the sandboxes here are built from."""
    return CONFIG


@pytest.fixture
def sandbox(make_sandbox: Callable[..., Built]) -> Sandbox:
    """A sandbox built from CONFIG."""
    return make_sandbox().sandbox


@pytest.fixture
def async_sandbox(tmp_path: Path) -> Iterator[AsyncSandbox]:
    """The asyncio twin, built from CONFIG."""
    config = load_config_text(CONFIG, source=tmp_path / "main.yaml")
    driver = local_sandbox_driver(permissions=config.permissions)
    sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
    yield sandbox
    sandbox.hooks.shutdown()


@pytest.fixture
def http_server() -> Iterator[LoopbackServer]:
    """A plain HTTP server on the host's loopback."""
    server = LoopbackServer(tls=False)
    yield server
    server.close()


@pytest.fixture
def https_server() -> Iterator[LoopbackServer]:
    """An HTTPS server on the host's loopback, its certificate (api.example.test, *.example.test) from a test CA."""
    server = LoopbackServer(tls=True)
    yield server
    server.close()


@pytest.fixture
def test_ca() -> str:
    """The PEM of the CA that signed the HTTPS server's certificate; pass it to a run as a file to trust it."""
    return (DATA / "test-ca.crt").read_text()


@pytest.fixture
def make_net_sandbox(make_sandbox: Callable[..., Built]) -> Callable[..., Built]:
    """Build a sandbox whose config lists the test hosts, on a driver that maps them to 127.0.0.1."""

    def make(**driver_options: Any) -> Built:
        config = load_config_text(NETWORK_CONFIG)
        driver = local_sandbox_driver(
            permissions=config.permissions,
            programs={"python": "python3", "node": "node", "bash": "bash", **driver_options.pop("programs", {})},
            resolve=RESOLVE,
            **driver_options,
        )
        return make_sandbox(NETWORK_CONFIG, driver=driver)

    return make


@pytest.fixture
def net_sandbox(make_net_sandbox: Callable[..., Built]) -> Built:
    """A sandbox (and its audit events) that can give runs the test hosts."""
    return make_net_sandbox()


@pytest.fixture
def net_sandbox_given_localhost() -> Iterator[Built]:
    """``net_sandbox`` with ``localhost`` in both lists, as a config built by hand (the loader refuses it in
    ``sandbox.network``): the proxy must keep a name off the host's loopback on its own."""
    loaded = load_config_text(NETWORK_CONFIG)
    config = attrs.evolve(
        loaded,
        sandbox=attrs.evolve(loaded.sandbox, network=(*loaded.sandbox.network, LOOPBACK_NAME)),
        network_allow=(*loaded.network_allow, LOOPBACK_NAME),
    )
    driver = local_sandbox_driver(
        permissions=config.permissions, programs={"python": "python3", "node": "node", "bash": "bash"}, resolve=RESOLVE
    )
    events: list[AuditEvent] = []
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver, log=events.append, load_entrypoints=False))
    yield Built(sandbox, events)
    sandbox.close()


# -- every escape attempt, cold and warm ------------------------------------------------------------------
# The escape attempts pass with the pool on, but most of their runs find no entry ready and run cold (6 of 37
# python runs were warm, when only Python had a pool). A test marked ``@pytest.mark.usefixtures("cold_and_warm")``
# runs twice: ``[cold]`` as it is, and ``[warm]`` with ``pool_forcing`` making entries of each run's kind ready
# first, so each such run (python, bash, node) must have taken one: the escape is tried from inside a warm
# interpreter or a pre-exec box, whose box was made before the run.


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that uses ``cold_and_warm`` once cold and once on warm pool entries."""
    if "cold_and_warm" in metafunc.fixturenames:
        metafunc.parametrize("cold_and_warm", ["cold", "warm"], indirect=True)


@pytest.fixture
def cold_and_warm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Cold: nothing. Warm: every run the pool can take must take a pool entry (``pool_forcing.force_warm``)."""
    if request.param == "cold":
        yield
        return
    # Imported here: only a warm run needs the launcher's pool internals, so no other test's collection does.
    from pool_forcing import force_warm, pool_works

    if not pool_works():
        pytest.skip("the warm pool needs namespaces and memory and pids cgroups (root): not here")
    seen = force_warm(monkeypatch)
    yield
    assert not seen.cold, f"{len(seen.cold)} runs the pool could take ran cold ({seen.warm} warm): {seen.cold}"
    assert not seen.unpooled, f"{seen.unpooled} python runs had no warm pool (is sandbox.local.pool 0?)"
