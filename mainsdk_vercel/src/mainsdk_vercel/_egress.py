"""Egress rules as Vercel's create takes them: the network policy and the header transforms (values never echoed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mainsdk.driver import EgressRule

from mainsdk_vercel._api import VercelError


def vercel_network_policy(hosts: Sequence[str]) -> dict[str, Any]:
    """The ``networkPolicy`` for hosts: ``deny-all`` with none, else exactly those domains allowed.

    The form is the v2 one the official clients send (vercel-sandbox 0.10.0,
    ``models._serialize_network_policy``: ``{"allow": {domain: [rules]}}``;
    the TypeScript SDK's ``toAPINetworkPolicy`` passes ``{"allow": [...]}``
    through): anything not allowed is denied. ``*.example.com`` wildcards pass as they are.
    """
    if not hosts:
        return {"mode": "deny-all"}
    return {"allow": {host: [] for host in hosts}}


def vercel_injection_policy(policy: Mapping[str, Any], rules: Sequence[EgressRule]) -> dict[str, Any]:
    """``policy`` (``vercel_network_policy``'s) with the egress headers: per host, one rule that sets them.

    The form is vercel-sandbox 0.10.0's (``models._serialize_network_policy``, a ``NetworkPolicyRule`` of one
    ``NetworkPolicyTransform``): ``{"allow": {host: [{"transform": [{"headers": {name: value}}]}]}}``; Vercel's
    firewall, outside the VM, adds or replaces those headers on the box's HTTPS requests to the host
    (changelog "Safely inject credentials in HTTP headers"), and reads back only their names
    (``injectionRules[].headerNames``, github vercel/sandbox ``utils/network-policy.ts``: "secret values are
    stripped"). Every other host keeps its plain entry.
    """
    allowed = policy.get("allow")
    allow: dict[str, Any] = (
        {host: list(entry) for host, entry in allowed.items()}
        if isinstance(allowed, Mapping)
        else {host: [] for host in allowed or ()}
    )
    for rule in rules:
        allow[rule.host] = [{"transform": [{"headers": {h.name: h.value for h in rule.headers}}]}]
    return {**policy, "allow": allow}


def without_values(error: VercelError, rules: Sequence[EgressRule]) -> VercelError:
    """``error`` with no egress header's value in its message, should Vercel's answer ever repeat one."""
    message = error.message
    for value in (v for rule in rules for h in rule.headers for v in (h.value, h.secret_value)):
        if value:
            message = message.replace(value, "[redacted]")
    return type(error)(message, error.vercel_status, error.vercel_code)
