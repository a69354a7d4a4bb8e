"""The kubernetes driver runs the conformance suite: the Kubernetes API replayed from cassettes, through the
official ``kubernetes`` client, and the pods' sandboxd served live by the stand-in (``standin_pods.py``).

Why sandboxd is live and not replayed: its ProcessService is gRPC (HTTP/2), which the replay server (HTTP/1.1,
one chunk per frame) does not speak, and the files a command writes must be the files the next read finds.
What is replayed is every request to the API server: the claim, its watch, the sandbox, the pod (its OOM status).

Replay: ``pytest mainsdk_kubernetes/tests/conformance``. Author the cassettes again against the stand-in:
``python mainsdk_kubernetes/tests/conformance/author.py``. Re-check them on a live cluster (token auth; the app
where it reaches the pods' IPs, and the warm pool of ``K8S_WARM_POOL`` in ``K8S_NAMESPACE``):
``KUBE_TOKEN=... mainsdk-conformance record --driver kubernetes --upstream api=https://<api-server>`` with
``K8S_ROUTER_URL`` for the sandbox-router, if any, and ``SSL_CERT_FILE`` naming the cluster's CA (the recorder's
httpx reads it) when the API server's certificate is not from a public CA; then ``author.py --finish``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import standin_pods
from mainsdk.config import AppConfig
from mainsdk_conformance import ConformanceTarget
from mainsdk_conformance.profiles import KUBERNETES, Profile
from standin_pods import ROOT, Pods, memory_cgroups

from mainsdk_kubernetes import driver_from_config

# The command stream is sandboxd's gRPC ProcessService, which a cassette does not hold (the replay server is
# HTTP/1.1), so there is no recorded command stream to cut or hold; tests/test_streams.py cuts and holds the live
# stream of the stand-in instead.
GRPC_FAULT = "the command stream is gRPC, which no cassette holds: tests/test_streams.py cuts and holds it live"
# The pods' memory limit is the stand-in's cgroup: a machine that lets it make none has no limit to replay against.
NO_CGROUP = "this machine lets the stand-in make no memory cgroup (v1 memory or v2, writable) for its pods' limit"
MEMORY_TESTS = (
    "TestLimits::test_code_cannot_hold_more_than_the_memory_limit",
    "TestLimits::test_passing_the_memory_limit_stops_with_memory",
    "TestLimits::test_the_memory_limit_holds_for_the_whole_process_tree",
)
MEMORY_CGROUPS = memory_cgroups()
NAMESPACE = "mainsdk"
POOL = "python-pool"
MEMORY = 64 * 1024 * 1024  # the template's pods' limit (64Mi), as the stand-in's API server says


@pytest.fixture
def conformance_profile() -> Profile:
    """The Kubernetes API server, as the official client speaks to it."""
    return KUBERNETES


@pytest.fixture
def standin(request: pytest.FixtureRequest) -> Iterator[Pods | None]:
    """The pods' sandboxd: the authoring run's stand-in, a fresh one for a replay, none for a live cluster."""
    if standin_pods.ACTIVE is not None:
        yield standin_pods.ACTIVE.pods
        return
    if request.config.getoption("conformance_record"):
        yield None  # a live cluster: its own pods
        return
    pods = Pods(memory=MEMORY)
    try:
        yield pods
    finally:
        pods.close()


@pytest.fixture
def conformance_target(conformance_replay: Any, standin: Pods | None) -> ConformanceTarget:
    """The real driver, with the official client, pointed at the test's replay server (or the recorder)."""
    url = conformance_replay.url("api")
    section: dict[str, Any] = {"namespace": NAMESPACE, "warm_pool": POOL, "languages": ["python", "bash"]}
    if standin is not None:
        section.update(router_url=standin.router_url, root=ROOT)
        address = standin.address
    else:
        section.update(
            namespace=os.environ.get("K8S_NAMESPACE", NAMESPACE), warm_pool=os.environ.get("K8S_WARM_POOL", POOL)
        )
        if os.environ.get("K8S_ROUTER_URL"):
            section["router_url"] = os.environ["K8S_ROUTER_URL"]
        address = None

    def build(config: AppConfig) -> object:
        return driver_from_config(config, api_url=url, address=address, token=os.environ.get("KUBE_TOKEN"))

    def unavailable(config: AppConfig) -> object:
        # Port 9 (discard) on loopback: nothing listens, the connection is refused.
        return driver_from_config(config, api_url="http://127.0.0.1:9", address=address)

    return ConformanceTarget(
        driver_id="kubernetes",
        driver=build,
        unavailable=unavailable,
        config={"sandbox": {"kubernetes": section}},
        # What a command keeps of the container's environment unless given: PATH and HOME (the wrapper's BASELINE).
        baseline_env=frozenset({"PATH", "HOME", "LC_CTYPE"}),
        expected_failures={
            "TestFaults::test_a_reset_mid_stream_is_0006_and_the_command_is_not_sent_again": GRPC_FAULT,
            "TestFaults::test_a_response_past_the_deadline_stops_the_run_at_its_time_limit": GRPC_FAULT,
            **({} if standin is None or MEMORY_CGROUPS else dict.fromkeys(MEMORY_TESTS, NO_CGROUP)),
        },
    )
