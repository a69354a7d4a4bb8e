"""The local driver runs the whole conformance suite live: `tox -e conformance-local`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mainsdk.config import AppConfig
from mainsdk_conformance import EGRESS_ORIGIN_CA, ConformanceTarget, NetworkHosts
from mainsdk_local.config import LocalPrograms

from mainsdk_local import LocalDriver, local_sandbox_driver

pytest_plugins = ["mainsdk_conformance.plugin"]

HOSTS = NetworkHosts()


def local_driver(config: AppConfig) -> LocalDriver:
    """The local driver as main.yaml describes it, with the suite's host names mapped to this machine's loopback
    for its proxy alone: the network tests reach the suite's origin on 127.0.0.1 and nothing else. The proxy checks
    the egress tests' origin against the suite's test CA (its ``upstream_ca`` test hook)."""
    local = config.sandbox.section("local", LocalPrograms)
    return local_sandbox_driver(
        permissions=config.permissions,
        programs={"python": local.python, "node": local.node, "bash": local.bash},
        resolve=dict.fromkeys(HOSTS.names(), "127.0.0.1"),
        upstream_ca=EGRESS_ORIGIN_CA,  # the egress tests' origin, checked by the proxy as the system's trust would be
    )


@pytest.fixture(scope="session", autouse=True)
def package_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The package envs the suite builds (TestPackages) go in a folder of this test run, not the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


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
        baseline_env=frozenset({"HOME", "TMPDIR", "LC_CTYPE"}),  # HOME and TMPDIR: folders of the box's own /tmp
    )
