"""Credentials added at the egress: headers whose values are secrets, for named hosts only, never in the box.

A call names, per host, the headers to add to the code's requests to it::

    egress={"api.openweathermap.org": {"headers": {"X-Api-Key": secret("OPENWEATHER_KEY")}}}

The code calls the API as if it were open; the driver's egress (the local proxy, a provider's network rules)
sets each header on every request to that host, replacing one of the same name the code sent, and on no
request to any other host. Core checks the shape (``MAIN-SANDBOX-0001``), that the driver can do it
(``Capabilities.egress_headers``, else 0001 naming the driver), that each host is in the run's ``network``
(``MAIN-SANDBOX-0005`` naming it) and each secret under ``sandbox.secrets`` with a value (``MAIN-SANDBOX-0009``
naming it), before anything runs; the driver gets the resolved rules in ``BoxSpec.egress``, whose values no
``repr`` shows. The audit event records the host, the header and the secret's name (``AuditEvent.egress``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import attrs

from mainsdk import errors
from mainsdk.errors import SandboxError
from mainsdk.hosts import host_covered, validate_host_pattern
from mainsdk.secrets import SECRET_NAME, SECRET_PREFIX, SecretRef, SecretResolver, resolve_secret, secret

# RFC 9110 5.6.2: a field name is a token. Matched whole (fullmatch): ``$`` also matches before a final newline.
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
# Headers that frame the message or steer the connection: the egress sets none of them (RFC 9110 7.6.1, 6.4).
HOP_BY_HOP = frozenset(
    {
        # RFC 9110 7.6.1: the connection's own fields, never forwarded (with those Connection names).
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "transfer-encoding",
        "upgrade",
        # The trailers' announcement (an intermediary that drops the trailers drops it too, RFC 9112 7.1.2),
        # and the proxy's own credentials (RFC 9110 11.7.2).
        "trailer",
        "proxy-authorization",
    }
)
"""Fields an intermediary never sends on: the one definition (the local proxy and the cassette replay use it)."""
FORBIDDEN_HEADERS = HOP_BY_HOP | {"host", "content-length", "proxy-authenticate", "expect"}
_NAME_RULE = "a secret name is letters, digits and _, not starting with a digit"
MAX_HOSTS = 32
MAX_HEADERS = 16
MAX_VALUE_BYTES = 8 * 1024  # what servers commonly take for one header line
EXAMPLE = "{'api.example.com': {'headers': {'X-Api-Key': secret('EXAMPLE_KEY')}}}"


@attrs.frozen
class EgressHeader:
    """One header the egress sets: its name, the secret it comes from, and (resolved) its value, never shown."""

    name: str
    secret: str  # the secret's name (what the audit records)
    value: str = attrs.field(repr=False, eq=False, default="")  # prefix + the secret's value
    secret_value: str = attrs.field(repr=False, eq=False, default="")  # the secret's value alone (for redaction)

    def __str__(self) -> str:
        return f"{self.name}: secret({self.secret!r})"


@attrs.frozen
class EgressRule:
    """The headers the egress sets on every request to ``host`` (an exact host name, lowercase)."""

    host: str
    headers: tuple[EgressHeader, ...]

    def audit_entries(self) -> tuple[tuple[str, str, str], ...]:
        """``(host, header, secret name)`` for each header: what an audit event records, never a value."""
        return tuple((self.host, h.name, h.secret) for h in self.headers)


def audit_entries(rules: Sequence[EgressRule]) -> tuple[tuple[str, str, str], ...]:
    """The audit event's ``egress`` field for ``rules``."""
    return tuple(entry for rule in rules for entry in rule.audit_entries())


def _invalid(argument: str, message: str) -> SandboxError:
    return SandboxError(errors.INVALID_OPTION, f"{argument}: {message}")


def check_shape(value: object) -> dict[str, dict[str, SecretRef]]:
    """The call's ``egress`` as host -> header name -> SecretRef; MAIN-SANDBOX-0001 naming what is wrong."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _invalid("egress", f"must be a mapping like {EXAMPLE}, not {type(value).__name__}")
    if len(value) > MAX_HOSTS:
        raise _invalid("egress", f"names {len(value)} hosts, more than the {MAX_HOSTS} one run may have")
    checked: dict[str, dict[str, SecretRef]] = {}
    for raw_host, rule in value.items():
        if not isinstance(raw_host, str):
            raise _invalid("egress", f"a host must be a string like 'api.example.com', not {type(raw_host).__name__}")
        try:
            host = validate_host_pattern(raw_host)
        except ValueError as exc:
            raise _invalid("egress", str(exc)) from None
        where = f"egress[{host!r}]"
        if host.startswith("*."):
            raise _invalid(where, "a credential goes to one host, not a wildcard; name the host, like api.example.com")
        if host.replace(".", "").isdigit() or ":" in host:
            raise _invalid(where, "name the host by its DNS name, not an IP address")
        if host in checked:
            raise _invalid(where, "is given twice")
        if not isinstance(rule, Mapping) or set(rule) != {"headers"}:
            shown = sorted(map(str, rule)) if isinstance(rule, Mapping) else type(rule).__name__
            raise _invalid(where, f"must be {{'headers': {{...}}}} and nothing else, not {shown}")
        headers = rule["headers"]
        if not isinstance(headers, Mapping) or not headers:
            raise _invalid(f"{where}.headers", "must be a non-empty mapping of header name to secret('NAME')")
        if len(headers) > MAX_HEADERS:
            raise _invalid(f"{where}.headers", f"holds more than {MAX_HEADERS} headers")
        names: dict[str, SecretRef] = {}
        seen: set[str] = set()
        for name, ref in headers.items():
            if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
                raise _invalid(f"{where}.headers", f"{name!r} is not an HTTP header name (letters, digits, -)")
            if name.lower() in FORBIDDEN_HEADERS or name.lower().startswith("proxy-"):
                raise _invalid(f"{where}.headers", f"{name} frames the request or the connection; it cannot be set")
            if name.lower() in seen:
                raise _invalid(f"{where}.headers", f"{name} is given twice (header names ignore case)")
            seen.add(name.lower())
            if not isinstance(ref, SecretRef):
                raise _invalid(
                    f"{where}.headers.{name}",
                    f"must be secret('NAME') (the value never enters the box), not {type(ref).__name__}",
                )
            names[name] = ref
        checked[host] = names
    return checked


def from_config(value: object) -> dict[str, dict[str, SecretRef]]:
    """``sandbox.egress`` of main.yaml, checked as a call's is; a header value is ``secret:NAME`` there.

    ``{secret: NAME, prefix: "Bearer "}`` gives a prefix. A value written out is refused: it never goes in a file.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError("expected a mapping like {api.example.com: {headers: {X-Api-Key: secret:EXAMPLE_KEY}}}")
    converted: dict[object, object] = {}
    for host, rule in value.items():
        converted[host] = rule
        if isinstance(rule, Mapping) and isinstance(rule.get("headers"), Mapping):
            items = rule["headers"].items()
            headers = {name: _configured_secret(item, f"{host}.headers.{name}") for name, item in items}
            converted[host] = {**rule, "headers": headers}
    return check_shape(converted)


def _configured_secret(item: object, where: str) -> SecretRef:
    # The refusal says which host's header is wrong (secret()'s own names only the text), and never quotes the
    # text: what follows secret: by mistake may be the value itself.
    if isinstance(item, str) and item.startswith(SECRET_PREFIX):
        if not SECRET_NAME.fullmatch(item.removeprefix(SECRET_PREFIX)):
            raise _invalid(where, f"what follows secret: is not a secret name; {_NAME_RULE}, like secret:EXAMPLE_KEY")
        return secret(item.removeprefix(SECRET_PREFIX))
    if isinstance(item, Mapping) and set(item) <= {"secret", "prefix"} and isinstance(item.get("secret"), str):
        prefix = item.get("prefix", "")
        if not SECRET_NAME.fullmatch(item["secret"]):
            raise _invalid(where, f"its secret is not a secret name; {_NAME_RULE}, like {{secret: EXAMPLE_KEY}}")
        if isinstance(prefix, str):
            try:
                return secret(item["secret"], prefix=prefix)
            except SandboxError as exc:  # the prefix: secret() says what a prefix may be
                raise _invalid(where, exc.message) from None
    raise _invalid(
        where,
        "must be secret:NAME or {secret: NAME, prefix: 'Bearer '} naming a secret of sandbox.secrets; "
        "a header's value never goes in main.yaml",
    )


def plan_egress(
    value: object,
    *,
    hosts: Sequence[str],
    secrets: Sequence[str],
    resolver: SecretResolver,
    can: bool,
    driver_id: str,
    configured: Mapping[str, Mapping[str, SecretRef]] | None = None,
) -> tuple[EgressRule, ...]:
    """The run's egress rules, resolved: shape, driver, host in the run's ``network``, secret allowed and set.

    ``configured`` (``sandbox.egress``) applies to each of its hosts the run is given; the call's rule for a
    host replaces the configured one for that host.
    """
    checked = check_shape(value)
    merged: dict[str, tuple[str, Mapping[str, SecretRef]]] = {
        host: ("sandbox.egress", headers)
        for host, headers in (configured or {}).items()
        if host_covered(host, tuple(hosts))
    }
    merged.update({host: ("egress", headers) for host, headers in checked.items()})
    if not merged:
        return ()
    if not can:
        source = "egress" if checked else f"sandbox.egress (for {', '.join(merged)}, which the run is given)"
        raise SandboxError(
            errors.INVALID_OPTION,
            f"{source}: the {driver_id!r} driver cannot add headers at the egress (it does not declare "
            "Capabilities.egress_headers); drop it, or use a driver that can",
        )
    rules: list[EgressRule] = []
    for host, (source, headers) in merged.items():
        if not host_covered(host, tuple(hosts)):
            raise SandboxError(
                errors.HOST_NOT_ALLOWED,
                f"egress host {host!r} is not in this run's network; add it to network=[...] (and to "
                "sandbox.network and network.allow), or drop it from egress",
            )
        resolved: list[EgressHeader] = []
        for name, ref in headers.items():
            where = f"{source}[{host!r}].headers.{name}"
            secret_value = resolve_secret(ref, where, secrets, resolver)
            header_value = ref.prefix + secret_value
            # Never shown: only that it cannot be sent. Visible ASCII and tabs (RFC 9110 5.5), no CR/LF.
            if len(header_value) > MAX_VALUE_BYTES or not all(" " <= c <= "~" or c == "\t" for c in header_value):
                raise _invalid(
                    where,
                    f"secret {ref.name!r} holds a character an HTTP header cannot carry (only visible ASCII) "
                    f"or is longer than {MAX_VALUE_BYTES} bytes",
                )
            resolved.append(EgressHeader(name, ref.name, header_value, secret_value))
        rules.append(EgressRule(host, tuple(resolved)))
    return tuple(rules)


def secret_values(rules: Sequence[EgressRule]) -> tuple[bytes, ...]:
    """The raw secret values of ``rules`` (and the whole header values), for core's output redaction."""
    values = (v for rule in rules for h in rule.headers for v in (h.secret_value, h.value))
    return tuple(dict.fromkeys(v.encode() for v in values if v))
