"""A run's hosts as what the cluster can enforce: nothing out (the template's policy), or a Cilium FQDN policy.

A Kubernetes ``NetworkPolicy`` (what a ``SandboxTemplate``'s ``networkPolicy`` is) names peers by CIDR and label,
never by host name, so it cannot hold an allowlist of hosts. Where the cluster runs Cilium, a
``CiliumNetworkPolicy`` (``cilium.io/v2``) can: ``toFQDNs`` with ``matchName`` / ``matchPattern``, enforced by
Cilium's DNS proxy, which only lets the pod resolve those names (the ``dns`` rules on kube-dns) and then reach the
addresses it answered (docs.cilium.io, "DNS based" policy, ``toFQDNs`` and ``rules.dns``). Policies add up: the
template's deny-all egress stays, and this one allows only the hosts, on 80 and 443.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mainsdk.driver import Scheme

GROUP, VERSION, PLURAL = "cilium.io", "v2", "ciliumnetworkpolicies"
CRD = "ciliumnetworkpolicies.cilium.io"
KUBE_DNS = {"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}
EXTRA_REACH = ("kube-dns (UDP/TCP 53, only the run's host names)",)
PORTS: tuple[tuple[Scheme, int | None], ...] = (("https", 443), ("http", 80))


def _match(host: str) -> dict[str, str]:
    # Cilium's matchPattern (pkg/fqdn/matchpattern): "*" stands for DNS characters without a dot, so
    # *.example.com is one level of subdomain, never the apex: where it differs from a wildcard elsewhere, it
    # is the stricter.
    return {"matchPattern": host} if host.startswith("*.") else {"matchName": host}


def cilium_egress(hosts: Sequence[str]) -> dict[str, Any] | None:
    """The hosts as a ``CiliumNetworkPolicy``'s egress rules (no hosts: None, the template lets nothing out)."""
    if not hosts:
        return None
    names = [_match(h) for h in hosts]
    return {
        "kind": "CiliumNetworkPolicy",
        "egress": [
            {
                "toEndpoints": [{"matchLabels": dict(KUBE_DNS)}],
                "toPorts": [
                    {
                        "ports": [{"port": "53", "protocol": "ANY"}],
                        "rules": {"dns": names},
                    }
                ],
            },
            {
                "toFQDNs": names,
                "toPorts": [{"ports": [{"port": str(port), "protocol": "TCP"} for _, port in PORTS if port]}],
            },
        ],
    }


def selector_labels(selector: str) -> dict[str, str]:
    """A ``Sandbox``'s ``status.selector`` (``k=v,k2=v2``: its pod's labels) as ``matchLabels``."""
    labels: dict[str, str] = {}
    for part in selector.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key or value.startswith("="):
            raise ValueError(f"the Sandbox's selector {selector[:120]!r} is not a list of key=value labels")
        labels[key] = value
    return labels


def cilium_policy(name: str, namespace: str, selector: dict[str, str], policy: dict[str, Any]) -> dict[str, Any]:
    """The ``CiliumNetworkPolicy`` object for one claimed pod."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "mainsdk"}},
        "spec": {"endpointSelector": {"matchLabels": selector}, "egress": policy["egress"]},
    }
