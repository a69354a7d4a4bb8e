"""Every check a call passes before anything runs (its policy, against main.yaml and the driver). A failed
check raises; nothing has started. Not the ``mainsdk check`` linter (``mainsdk_check``), which runs before a commit.

``plan_run`` turns a call's options into a ``RunPlan``: the limits lowered by
the call, the hosts, the environment with secrets resolved, the files, and the
worst-case cost, each checked against ``main.yaml`` and the driver.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import attrs

from mainsdk import arguments, egress, errors
from mainsdk.config import AppConfig, Limits
from mainsdk.driver import LANGUAGES, Capabilities, RunLimits
from mainsdk.egress import EgressRule
from mainsdk.errors import SandboxError
from mainsdk.hosts import host_covered, validate_host_pattern
from mainsdk.packages import select_packages
from mainsdk.secrets import SecretRef, SecretResolver, resolve_secret
from mainsdk.units import MAX_IDLE, describe, format_duration, format_size, parse_duration, parse_money, parse_size

ENV_NAME = arguments.ENV_NAME
# Measured on the local driver: below 4 MiB a cgroup limit cannot even be set on a fresh run (EBUSY) and no
# interpreter starts; below one page the box's tmpfs cannot be mounted. Both are mistakes, never outages.
MIN_MEMORY = 4 * 1024 * 1024
MIN_DISK = 4096
PAGE = 4096
PRODUCTION_ENVS = ("prod", "production")  # in the order their overlays are read
HostMatcher = Callable[[str], bool]


def _invalid(message: str) -> SandboxError:
    return SandboxError(errors.INVALID_OPTION, message)


@attrs.frozen
class BoxOptions:
    """What a call asks of its box, as the app passed it (secrets by name): ``plan_run`` checks it into a ``RunPlan``.

    A session keeps it (``checkpoints.SessionOptions``), so a fork or a resumed session is planned again from it.
    """

    files: Mapping[str, str | bytes] | None = None
    network: Sequence[str] = ()
    env: Mapping[str, str | SecretRef] | None = None
    limits: Mapping[str, Any] | None = None
    max_cost: object = None
    packages: object = None
    egress: object = None


@attrs.frozen
class RunPlan:
    """A call that passed every check: what the run gets, and nothing more."""

    limits: RunLimits
    hosts: tuple[str, ...]
    env: Mapping[str, str] = attrs.field(repr=False)  # holds secret values: never printed
    env_names: tuple[str, ...]
    secret_values: tuple[bytes, ...] = attrs.field(repr=False)
    files: Mapping[str, bytes] = attrs.field(repr=False)
    price: Decimal
    max_cost: Decimal | None
    packages: tuple[str, ...] = ()  # pinned python packages the box gets (``sandbox.packages``)
    # Headers the egress sets per host (``mainsdk.egress``), resolved: never printed, never in the box.
    egress: tuple[EgressRule, ...] = attrs.field(default=(), repr=False)


def is_production(environment: str | None = None) -> bool:
    """Whether the app runs in production (``MAINSDK_ENV=production`` or ``prod``)."""
    value = environment if environment is not None else os.environ.get("MAINSDK_ENV", "")
    return value.strip().lower() in PRODUCTION_ENVS


def check_driver_allowed(driver_id: str, caps: Capabilities, environment: str | None) -> None:
    """Refuse a development-only driver in production."""
    if not caps.production and is_production(environment):
        raise SandboxError(
            errors.LOCAL_IN_PRODUCTION,
            f"the {driver_id!r} sandbox driver is refused in production; set sandbox.driver to vercel-sandbox or e2b",
        )


def check_language(language: str, caps: Capabilities, driver_id: str) -> None:
    """A language core knows and the driver runs."""
    if language not in LANGUAGES:
        raise _invalid(f"language {language!r} is unknown; use one of {', '.join(LANGUAGES)}")
    if language not in caps.languages:
        raise _invalid(f"the {driver_id!r} driver does not run {language}; it runs {', '.join(sorted(caps.languages))}")


# How each limit a call lowers is read and shown: a duration or a size.
_LIMIT_UNITS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], str]]] = {
    "timeout": (parse_duration, format_duration),
    "memory": (parse_size, format_size),
    "output": (parse_size, format_size),
    "files": (parse_size, format_size),
}


def lower_limits(requested: Mapping[str, Any] | None, config: AppConfig) -> RunLimits:
    """The call's limits, each at most the config's. A call may lower a limit, never raise it."""
    allowed: Limits = config.sandbox.limits
    values = {"timeout": allowed.timeout, "memory": allowed.memory, "output": allowed.output, "files": allowed.files}
    for key, raw in arguments.limits(requested).items():
        if key in ("max-cost", "max_cost"):
            continue  # checked with the cost
        parse, shown_as = _LIMIT_UNITS[key]
        try:
            value = parse(raw)
        except (ValueError, ArithmeticError) as exc:
            raise _invalid(f"limits.{key}: {exc}") from None
        if value > values[key]:
            shown = shown_as(value) if value < 2**63 else describe(raw)
            raise _invalid(
                f"limits.{key} {shown} is above sandbox.limits.{key} {shown_as(values[key])}; "
                f"a call may lower a limit, never raise it: lower it, or raise sandbox.limits.{key} in main.yaml"
            )
        values[key] = value
    if values["memory"] < MIN_MEMORY:
        key = "limits.memory" if "memory" in (requested or {}) else "sandbox.limits.memory"
        raise _invalid(
            f"{key} {format_size(int(values['memory']))} is below the {format_size(MIN_MEMORY)} a run needs to "
            f"start; give it at least {format_size(MIN_MEMORY)}"
        )
    if config.permissions.disk.temp_max < MIN_DISK:
        raise _invalid(
            f"permissions.disk.temp.max {format_size(config.permissions.disk.temp_max)} is below the "
            f"{format_size(MIN_DISK)} a box needs to start; raise it in main.yaml, like 64MB"
        )
    return RunLimits(
        timeout=values["timeout"],
        memory=int(values["memory"]),
        output=int(values["output"]),
        files=int(values["files"]),
        disk=config.permissions.disk.temp_max,
    )


def check_files(files: object, limit: int, disk: int | None = None) -> dict[str, bytes]:
    """Files go into the work folder only, by a plain relative path, and fit ``limits.files`` and the box's disk."""
    checked = arguments.files(files)
    total = sum(len(data) for data in checked.values())
    if total > limit:
        raise _invalid(
            f"files hold {format_size(total)}, above limits.files {format_size(limit)}; pass less, or raise the limit"
        )
    # tmpfs counts whole pages: each file takes at least one.
    pages = sum(max(1, -(-len(data) // PAGE)) for data in checked.values()) * PAGE
    if disk is not None and pages > disk:
        raise _invalid(
            f"files take {format_size(pages)} on disk, above permissions.disk.temp.max {format_size(disk)}; "
            "pass less, or raise permissions.disk.temp.max in main.yaml"
        )
    return checked


def check_hosts(
    hosts: Sequence[str] | None, config: AppConfig, network_allow: HostMatcher, caps: Capabilities, driver_id: str
) -> tuple[str, ...]:
    """Each host must be in ``sandbox.network`` and ``network.allow``, and the driver must be able to give it."""
    if isinstance(hosts, str):
        raise _invalid("network must be a list of hosts, like ['pypi.org'], not a string")
    checked: list[str] = []
    for raw in hosts or ():
        try:
            host = validate_host_pattern(raw)
        except ValueError as exc:
            raise _invalid(f"network: {exc}") from None
        missing = []
        if not host_covered(host, config.sandbox.network):
            missing.append("sandbox.network")
        if not network_allow(host):
            missing.append("network.allow")
        if missing and (host == "localhost" or host.endswith(".localhost")):
            # The advice at the call, not "add it" and then a load error: main.yaml refuses a name for loopback,
            # and the proxy never lets one through.
            raise _invalid(
                f"network: {host!r} is a name for a loopback address, which a run is never let through to by name "
                "(main.yaml refuses it too); to reach the app host's own servers, give 127.0.0.1 (or ::1): "
                "network=['127.0.0.1'], listed under sandbox.network and network.allow, and the code connects to "
                "http://127.0.0.1:PORT"
            )
        if missing:
            raise SandboxError(
                errors.HOST_NOT_ALLOWED,
                f"host {host!r} is not in {' or '.join(missing)}; add it to both sandbox.network and network.allow "
                "in main.yaml, or drop it from the call",
            )
        checked.append(host)
    if checked and not caps.network:
        raise SandboxError(
            errors.HOST_NOT_ALLOWED,
            f"the {driver_id!r} driver cannot give a run network access; call it without network",
        )
    if any(h.startswith("*.") for h in checked) and not caps.wildcard_hosts:
        raise _invalid(f"the {driver_id!r} driver cannot give wildcard hosts; name each host")
    return tuple(dict.fromkeys(checked))


def _no_file_read(config: AppConfig) -> str:
    """What a refusal adds when no main.yaml was read at all (the app runs from another folder, say)."""
    if config.source is not None:
        return f" ({config.source})"
    return (
        f" (no main.yaml was read: none in the current folder, {os.getcwd()}, and MAINSDK_CONFIG unset; "
        "set MAINSDK_CONFIG=/path/to/main.yaml to use yours)"
    )


def resolve_env(
    env: Mapping[str, str | SecretRef] | None, config: AppConfig, resolver: SecretResolver
) -> tuple[dict[str, str], tuple[bytes, ...]]:
    """The run's environment: plain values as given, secrets only when listed under ``sandbox.secrets``.

    Returns the environment and the secret values to redact from the output.
    """
    resolved: dict[str, str] = {}
    secret_values: list[bytes] = []
    for name, value in arguments.env(env).items():
        if isinstance(value, SecretRef):
            listed = config.sandbox.secrets
            secret_value = resolve_secret(value, f"env.{name}", listed, resolver, _no_file_read(config))
            # Never shown: the value is a secret. Only whether it could be passed at all.
            if "\0" in secret_value or len(secret_value.encode("utf-8", "replace")) > arguments.MAX_ARG_BYTES:
                raise _invalid(f"env.{name}: secret {value.name!r} holds a NUL byte or is too long to pass")
            try:
                secret_values.append(secret_value.encode())
            except UnicodeEncodeError:
                raise _invalid(f"env.{name}: secret {value.name!r} is not valid Unicode text") from None
            resolved[name] = value.prefix + secret_value
        else:
            resolved[name] = value
    if arguments.argv_env_bytes((), resolved) > arguments.MAX_ARGV_ENV_BYTES:
        raise _invalid(f"env holds more than {arguments.MAX_ARGV_ENV_BYTES} bytes in all; pass large data as a file")
    return resolved, tuple(secret_values)


def check_cost(
    max_cost: object, config: AppConfig, caps: Capabilities, timeout: float
) -> tuple[Decimal, Decimal | None]:
    """The worst case (price per second x timeout) must fit the call's and the config's ceiling."""
    price = config.sandbox.price if config.sandbox.price is not None else caps.price_per_second
    ceiling = config.sandbox.limits.max_cost
    if max_cost is not None:
        try:
            requested = parse_money(arguments.limit_value(max_cost, "max_cost"))
        except (ValueError, ArithmeticError) as exc:
            raise _invalid(f"max_cost: {exc}") from None
        if ceiling is not None and requested > ceiling:
            raise _invalid(
                f"max_cost ${requested} is above sandbox.limits.max-cost ${ceiling}; a call may lower it, not raise it"
            )
        ceiling = requested
    worst = price * Decimal(str(timeout))
    if ceiling is not None and worst > ceiling:
        raise SandboxError(
            errors.COST,
            f"the worst case ${worst.normalize()} (${price} per second x {format_duration(timeout)}) is above the "
            f"cost ceiling ${ceiling}; lower the timeout or raise max-cost",
        )
    return price, ceiling


def check_packages(requested: object, config: AppConfig, caps: Capabilities, driver_id: str) -> tuple[str, ...]:
    """The pinned packages a call gets: all of ``sandbox.packages.python`` by default, or the subset it names.

    Asking for one not configured is ``MAIN-SANDBOX-0001`` naming it; so is asking a driver that cannot put
    packages in a box (``Capabilities.packages``) for any. A call with no packages configured gets none.
    """
    chosen = select_packages(requested, config.sandbox.packages.python, "python")
    if chosen and not caps.packages:
        how = "call with packages=[]" if requested is None else "drop packages from the call"
        raise _invalid(
            f"packages: the {driver_id!r} driver cannot put packages in a box here (it does not declare "
            f"Capabilities.packages); {how}, or use a driver that can"
        )
    return chosen


def check_idle(idle: object) -> float:
    """A session's idle timeout: a positive duration of at most ``units.MAX_IDLE``."""
    try:
        return parse_duration(arguments.limit_value(idle, "idle"), maximum=MAX_IDLE)
    except (ValueError, ArithmeticError) as exc:
        raise _invalid(f"idle: {exc}") from None


def plan_run(
    *,
    config: AppConfig,
    caps: Capabilities,
    driver_id: str,
    network_allow: HostMatcher,
    resolver: SecretResolver,
    files: Mapping[str, str | bytes] | None,
    network: Sequence[str] | None,
    env: Mapping[str, str | SecretRef] | None,
    limits: Mapping[str, Any] | None,
    max_cost: object,
    packages: object = None,
    egress_rules: object = None,
) -> RunPlan:
    """Check a call's options against the config and the driver, in the order a user would fix them."""
    run_limits = lower_limits(limits, config)
    if max_cost is None and limits is not None:
        max_cost = limits.get("max-cost", limits.get("max_cost"))
    checked_files = check_files(files, run_limits.files, run_limits.disk)
    hosts = check_hosts(arguments.hosts(network), config, network_allow, caps, driver_id)
    resolved_env, secret_values = resolve_env(env, config, resolver)
    rules = egress.plan_egress(
        egress_rules,
        hosts=hosts,
        secrets=config.sandbox.secrets,
        resolver=resolver,
        can=caps.egress_headers,
        driver_id=driver_id,
        configured=config.sandbox.egress,
    )
    secret_values = tuple(dict.fromkeys((*secret_values, *egress.secret_values(rules))))
    price, ceiling = check_cost(max_cost, config, caps, run_limits.timeout)
    chosen_packages = check_packages(packages, config, caps, driver_id)
    return RunPlan(
        limits=run_limits,
        hosts=hosts,
        env=resolved_env,
        env_names=tuple(sorted(resolved_env)),
        secret_values=secret_values,
        files=checked_files,
        price=price,
        max_cost=ceiling,
        packages=chosen_packages,
        egress=rules,
    )
