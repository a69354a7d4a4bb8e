"""The local driver runs the whole conformance suite live: `tox -e conformance-local`."""

from __future__ import annotations

import pytest
from mainsdk.config import AppConfig
from mainsdk_conformance import ConformanceTarget, NetworkHosts
from mainsdk_local.config import LocalPrograms

from mainsdk_local import LocalDriver, local_sandbox_driver

pytest_plugins = ["mainsdk_conformance.plugin"]

HOSTS = NetworkHosts()


def local_driver(config: AppConfig) -> LocalDriver:
    """The local driver as main.yaml describes it, with the suite's host names mapped to this machine's loopback
    for its proxy alone: the network tests reach the suite's origin on 127.0.0.1 and nothing else."""
    local = config.sandbox.section("local", LocalPrograms)
    return local_sandbox_driver(
        permissions=config.permissions,
        programs={"python": local.python, "node": local.node, "bash": local.bash},
        resolve=dict.fromkeys(HOSTS.names(), "127.0.0.1"),
    )


@pytest.fixture
def conformance_target() -> ConformanceTarget:
    """The local driver, with the interpreters permitted."""
    return ConformanceTarget(
        driver_id="local",
        driver=local_driver,
        config={
            "sandbox": {"local": {"python": "python3", "node": "node", "bash": "bash"}},
            "permissions": {"processes": ["python3", "node", "bash"], "disk": {"temp": {"max": "64MB"}}},
        },
        hosts=HOSTS,
    )
