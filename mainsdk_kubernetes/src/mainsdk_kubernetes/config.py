"""``sandbox.kubernetes``: the kubernetes driver's own section of ``main.yaml``, declared in ``mainsdk.driver_configs``.

Kept light (attrs and mainsdk only): core imports it to check the section whether or not the driver is used.
"""

from __future__ import annotations

import re
from typing import Any

import attrs
from mainsdk.driver import LANGUAGES, Credential, parse_duration

__all__ = ["ISOLATIONS", "KubernetesConfig"]

# A Kubernetes object name as the API server takes it (a DNS-1123 label: what the sandbox-router checks too,
# agent-sandbox clients/python/agentic-sandbox-client/sandbox-router/sandbox_router.py DNS_LABEL_REGEX).
_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
ISOLATIONS = ("microvm", "namespace")
REACHES = ("pod-ip", "service")
NETWORKS = ("none", "cilium")


def _label(instance: Any, attribute: Any, value: str | None) -> None:
    if value is not None and not _LABEL.fullmatch(value):
        raise ValueError(
            f"{attribute.name} {value[:70]!r} is not a Kubernetes name: lowercase letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit"
        )


def _reach(instance: Any, attribute: Any, value: str) -> None:
    if value not in REACHES:
        raise ValueError(f"reach {value!r} is not one of {', '.join(REACHES)}")


def _network(instance: Any, attribute: Any, value: str) -> None:
    if value not in NETWORKS:
        raise ValueError(f"network {value!r} is not one of {', '.join(NETWORKS)}")


def _port(instance: Any, attribute: Any, value: int) -> None:
    if not 1 <= value <= 65535:
        raise ValueError(f"{attribute.name} {value} is not a TCP port (1 to 65535)")


def _router(instance: Any, attribute: Any, value: str | None) -> None:
    if value is not None and not re.fullmatch(r"https?://[^\s/?#]+(?:/[^\s?#]*)?", value):
        raise ValueError(f"router_url {value[:80]!r} is not an http:// or https:// URL")


def _runtimes(instance: Any, attribute: Any, value: dict[str, str]) -> None:
    for handler, isolation in value.items():
        if isolation not in ISOLATIONS:
            raise ValueError(
                f"runtime_isolation: {handler!r} maps to {isolation!r}; use one of {', '.join(ISOLATIONS)}"
            )


def _languages(instance: Any, attribute: Any, value: list[str]) -> None:
    for language in value:
        if language not in LANGUAGES:
            raise ValueError(f"languages: {language!r} is not one of {', '.join(LANGUAGES)}")


def _root(instance: Any, attribute: Any, value: str) -> None:
    if not re.fullmatch(r"(/[A-Za-z0-9._-]+)+", value) or "/../" in value + "/" or "/./" in value + "/":
        raise ValueError(f"root {value[:80]!r} is not an absolute folder path (sandboxd's --root-dir)")


def _duration(instance: Any, attribute: Any, value: str) -> None:
    try:
        parse_duration(value, maximum=3600.0)
    except ValueError as exc:
        raise ValueError(f"{attribute.name}: {exc}") from None


@attrs.frozen
class KubernetesConfig:
    """``sandbox.kubernetes``: where the agent-sandbox warm pool is and how to reach its pods.

    ``warm_pool`` (required to run): the ``SandboxWarmPool`` every run and session claims a pod of, in
    ``namespace``. ``kubeconfig`` / ``context`` (the default kubeconfig when unset) or ``in_cluster: true`` (the
    pod's service account). ``reach``: how the driver reaches sandboxd in a claimed pod, ``pod-ip`` (the
    Sandbox's ``status.podIPs``) or ``service`` (its ``status.serviceFQDN``); both need the app inside the
    cluster network, since sandboxd's gRPC ProcessService cannot go through the sandbox-router.
    ``router_url`` (optional): sandboxd's REST file API through the sandbox-router instead, with
    ``router_token`` as its bearer token. ``allow_runc``: run in pods with no RuntimeClass (plain runc,
    isolation ``namespace``), refused unless set. ``runtime_isolation``: what a RuntimeClass handler this driver
    does not know isolates as (``microvm`` or ``namespace``). ``languages``: what the template's image runs (of
    ``python``, ``node``, ``bash``). ``root``: sandboxd's ``--root-dir`` in the pods (``/workspace``).
    ``network``: ``none`` (runs naming hosts are refused) or ``cilium`` (a ``CiliumNetworkPolicy`` with the run's
    hosts as ``toFQDNs``, made for each claimed pod before anything runs in it).
    """

    namespace: str = attrs.field(default="default", validator=_label)
    warm_pool: str | None = attrs.field(default=None, validator=_label)
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    reach: str = attrs.field(default="pod-ip", validator=_reach)
    router_url: str | None = attrs.field(default=None, validator=_router)
    router_token: Credential = attrs.field(default=Credential.named("SANDBOX_ROUTER_TOKEN"))
    rest_port: int = attrs.field(default=8080, validator=_port)
    grpc_port: int = attrs.field(default=9090, validator=_port)
    allow_runc: bool = False
    runtime_isolation: dict[str, str] = attrs.field(factory=dict, validator=_runtimes)
    ready_timeout: str = attrs.field(default="120s", validator=_duration)
    root: str = attrs.field(default="/workspace", validator=_root)
    network: str = attrs.field(default="none", validator=_network)
    languages: list[str] = attrs.field(factory=lambda: ["python", "bash"], validator=_languages)

    @property
    def ready_seconds(self) -> float:
        """Seconds to wait for a claim to be ready."""
        return parse_duration(self.ready_timeout, maximum=3600.0)
