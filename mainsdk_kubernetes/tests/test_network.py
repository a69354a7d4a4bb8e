"""Network policy translation: no egress by default; hosts as a Cilium FQDN policy where the cluster serves one,
made for the claimed pod before anything runs in it; a clear 0001 before anything starts where it does not.

The stand-in keeps the policies it is given and enforces none (its pods have no network): what is tested is what
the cluster is asked to enforce, and when. Enforcement rests on Cilium (the README says so).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mainsdk
import pytest
from mainsdk.audit import AuditEvent
from mainsdk_kubernetes.network import EXTRA_REACH
from standin_cluster import make_sandbox

NETWORK = (
    "    network: cilium\n"  # sandbox.kubernetes.network
    "  network: [api.example.com, '*.example.org']\n"  # sandbox.network
    "network:\n  allow: [api.example.com, '*.example.org']\n"
)


def _box(c: Any, tmp_path: Path, log: list[AuditEvent] | None = None) -> mainsdk.Sandbox:
    """A sandbox on the cluster with ``network: cilium`` and the two hosts allowed; audit events to ``log``."""
    return make_sandbox(c, tmp_path, NETWORK, **({"log": log.append} if log is not None else {}))


def test_hosts_become_a_cilium_fqdn_policy_on_the_pod_before_anything_runs(cluster: Any, tmp_path: Path) -> None:
    c = cluster(cilium=True)
    events: list[Any] = []
    result = _box(c, tmp_path, events).run("print(1)", network=["api.example.com", "*.example.org"])
    assert result.stdout == "1\n", result.stderr
    assert c.api.policy_at == [0]  # made before the command's Start
    assert c.api.policies == {}  # deleted with the pod
    [event] = [e for e in events if e.kind == "run"]
    assert "toFQDNs" in json.dumps(event.network_policy) and event.extra_reach == EXTRA_REACH


def test_the_policy_names_the_hosts_and_selects_the_claimed_pod(cluster: Any, tmp_path: Path) -> None:
    c = cluster(cilium=True)
    kept: list[dict[str, Any]] = []
    original = c.api.policies.__class__.__setitem__

    class Keeping(dict[str, dict[str, Any]]):
        def __setitem__(self, key: str, value: dict[str, Any]) -> None:
            kept.append(value)
            original(self, key, value)

    c.api.policies = Keeping()
    _box(c, tmp_path).run("print(1)", network=["api.example.com", "*.example.org"])
    [policy] = kept
    spec = policy["spec"]
    assert spec["endpointSelector"] == {"matchLabels": {"agents.x-k8s.io/sandbox-name-hash": "python-pool-00001"}}
    dns, fqdn = spec["egress"]
    names = [{"matchName": "api.example.com"}, {"matchPattern": "*.example.org"}]
    assert dns["toPorts"][0]["rules"]["dns"] == names and fqdn["toFQDNs"] == names
    assert [p["port"] for p in fqdn["toPorts"][0]["ports"]] == ["443", "80"]


def test_a_cluster_without_cilium_cannot_express_hosts_and_refuses_before_any_claim(
    cluster: Any, tmp_path: Path
) -> None:
    c = cluster(cilium=False)
    with pytest.raises(mainsdk.SandboxError) as refused:
        _box(c, tmp_path).run("print(1)", network=["api.example.com"])
    assert refused.value.code == "MAIN-SANDBOX-0001"
    assert "api.example.com" in refused.value.message and "CiliumNetworkPolicy" in refused.value.message
    assert c.api.claim_bodies == []
    # Without hosts it runs, under the template's deny-all, with no policy made.
    assert _box(c, tmp_path).run("print(2)").stdout == "2\n"
    assert c.api.policy_at == []
