"""E2B's egress: the policy for a run's hosts, the create's ``network.rules`` for its egress headers, and what
of those rules the driver refuses before anything is sent (only what every E2B server refuses).

Which server takes which rules (each refusal is a 400 before anything is made, ``validateNetworkRules``):

- **API release 2026.30 and later** (hosted E2B; the newer API tree, e2b-dev/runtime
  ``packages/api/internal/handlers/sandbox_create.go`` at 2875315b): a rule's domain may be a DNS name or a
  ``*.example.com`` wildcard (``sandbox_network.IsValidWildcardDomainPattern``); keys must be unique ignoring
  case; the number of domains is the team's ``max-network-rule-domains`` flag (default 10,
  ``featureflags/flags.go`` ``MaxNetworkRuleDomains``), so a team may have more.
- **Releases up to 2026.29** (and the open e2b-dev/infra tree, ``sandbox_create.go``): DNS names only
  (``govalidator.IsDNSName``), at most 10 domains (the constant ``maxNetworkRuleDomains``).

The driver cannot tell which release answers, so it sends wildcards and any number of domains, and says what
the server's 400 means (``refusal_remedy``). It refuses beforehand only what both refuse: a domain that is
neither a DNS name nor a wildcard, over 128 bytes, more than 20 headers a rule, a header name over 64 bytes, a
value over 2048 bytes or one holding E2B's placeholder marker. Both need the team's ``network-transform-rules``
flag and envd 0.5.13 or later.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from mainsdk.driver import INVALID_OPTION, EgressRule, NetworkReach, SandboxError


def e2b_network_policy(hosts: Sequence[str]) -> dict[str, list[str]]:
    """E2B's egress policy for ``hosts``: those allowed out, everything else denied; no hosts is nothing out.

    ``allow_out`` takes names and ``*.wildcards`` (filtered by Host on port 80
    and SNI on 443) and wins over ``deny_out``, which denies all IPv4 here.
    """
    return {"allow_out": list(hosts), "deny_out": ["0.0.0.0/0"]}


# The API's limits on a create's network.rules that every release holds (sandbox_create.go, both trees).
MAX_RULE_DOMAINS = 10  # the default of the team flag (2026.30+) and the constant before: never refused here
MAX_RULE_DOMAIN_BYTES = 128
MAX_HEADER_NAME_BYTES = 64
MAX_HEADER_VALUE_BYTES = 2048
MAX_HEADERS_PER_RULE = 20
# The release of E2B's API from which rule domains may be wildcards and the domain limit is the team's.
WILDCARD_RELEASE = "2026.30"
# A header value with these in it is read by E2B's egress proxy as a placeholder for a token or a team secret
# it holds (packages/shared/pkg/networktransform/placeholders.go): a secret's value is never one.
E2B_PLACEHOLDERS = ("${e2b.identity.tokens.", "${e2b.secrets.")
# govalidator IsDNSName, which the API holds each rule's domain to (no "*", no IP).
_DNS_NAME = re.compile(r"([a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?")
# A wildcard rule domain as 2026.30's IsValidWildcardDomainPattern takes it (sandbox-network's tests: "*.com",
# "*.s3.amazonaws.com" and "*.GITHUB.COM" yes; "*", "*.", "*.*.com", "api*.com", "github.*" and a final dot no;
# at most 253 characters in all).
_WILDCARD = re.compile(r"\*(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+")
MAX_WILDCARD_CHARS = 253


def valid_rule_domain(domain: str) -> bool:
    """A domain some E2B release takes as a rule's key: a DNS name (every release), or ``*.`` one (2026.30 on)."""
    if domain.startswith("*."):
        return len(domain) <= MAX_WILDCARD_CHARS and _WILDCARD.fullmatch(domain) is not None
    return _DNS_NAME.fullmatch(domain) is not None


def e2b_network_rules(rules: Sequence[EgressRule]) -> dict[str, list[dict[str, Any]]]:
    """The create's ``network.rules`` for the box's egress headers: per host, one rule that sets them.

    E2B's egress proxy sets each header on the box's HTTP and HTTPS requests to that domain, replacing one
    of the same name (spec/openapi.yml ``SandboxNetworkTransform``: "An existing header with the same name is
    replaced"); at most one rule per domain (``maxNetworkRuleTransformsPerDomain``). The values are the
    secrets' own: they go to E2B's API, never into the sandbox.
    """
    return {rule.host: [{"transform": {"headers": {h.name: h.value for h in rule.headers}}}] for rule in rules}


def check_egress(rules: Sequence[EgressRule]) -> None:
    """Refuse (MAIN-SANDBOX-0001, nothing sent) egress headers every E2B release would answer with a 400.

    Names the host, the header or the secret at fault, never a value. What only some releases refuse (a
    wildcard domain, more domains than 10) is sent; the server's answer is then explained (``refusal_remedy``).
    """
    for rule in rules:
        where = f"egress[{rule.host!r}]"
        if len(rule.host.encode()) > MAX_RULE_DOMAIN_BYTES or not valid_rule_domain(rule.host):
            raise SandboxError(
                INVALID_OPTION,
                f"{where}: E2B takes network rules for DNS names (and, from API release {WILDCARD_RELEASE}, "
                f"*.wildcards) of at most {MAX_RULE_DOMAIN_BYTES} characters only; name the host another way or "
                "drop it from egress",
                ran=False,
            )
        if len(rule.headers) > MAX_HEADERS_PER_RULE:
            raise SandboxError(
                INVALID_OPTION,
                f"{where}.headers: E2B sets at most {MAX_HEADERS_PER_RULE} headers per host; give fewer",
                ran=False,
            )
        for header in rule.headers:
            at = f"{where}.headers.{header.name}"
            if len(header.name.encode()) > MAX_HEADER_NAME_BYTES:
                raise SandboxError(
                    INVALID_OPTION,
                    f"{at}: E2B takes header names of at most {MAX_HEADER_NAME_BYTES} characters; use a shorter one",
                    ran=False,
                )
            if len(header.value.encode()) > MAX_HEADER_VALUE_BYTES:
                raise SandboxError(
                    INVALID_OPTION,
                    f"{at}: the value of secret {header.secret!r} (with its prefix) is longer than the "
                    f"{MAX_HEADER_VALUE_BYTES} bytes E2B takes for a header value",
                    ran=False,
                )
            if any(marker in header.value for marker in E2B_PLACEHOLDERS):
                raise SandboxError(
                    INVALID_OPTION,
                    f"{at}: the value of secret {header.secret!r} (with its prefix) holds '${{e2b.', which E2B's "
                    "egress proxy would read as a placeholder for another credential; it cannot be sent as it is",
                    ran=False,
                )


def refusal_remedy(reason: str) -> str:
    """What to do about E2B's 400 to a create with network rules, by what it says (sandbox_create.go's messages)."""
    if "not available for your team" in reason:
        return "network transform rules must be enabled for your E2B team, or drop egress"
    if "can have at most" in reason and "domains" in reason:
        return (
            "that is your team's limit (E2B's max-network-rule-domains, 10 unless E2B raised it for the team, API "
            f"release {WILDCARD_RELEASE} on; a fixed 10 before): give this run fewer hosts in egress, or ask E2B "
            "to raise it"
        )
    if "*." in reason and "not a valid domain" in reason:
        return (
            f"this E2B server takes no wildcard rule domains (API release {WILDCARD_RELEASE} and later do): name "
            "each host in egress"
        )
    return "fix what E2B names, or drop egress"


# E2B's egress firewall matches names only on port 80 (HTTP Host) and 443 (TLS SNI); every other port is
# CIDR-only (e2b-dev/infra packages/orchestrator/pkg/tcpfirewall/proxy.go). When any domain is allowed, the API
# adds its nameserver 8.8.8.8 to the allowed addresses, on every port (packages/api/internal/orchestrator/
# create_instance.go buildEgressConfig, packages/shared/pkg/sandbox-network/firewall.go DefaultNameserver).
E2B_NETWORK_REACH = NetworkReach(
    filtered=(("http", 80), ("https", 443)),
    extra=("8.8.8.8/32 every port (E2B's nameserver, opened whenever a domain is allowed)",),
)
