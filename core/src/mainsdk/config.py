"""The parsed ``main.yaml``: the ``sandbox`` section and the parts of the app config it reads.

Frozen attrs classes, built by a cattrs converter that refuses unknown keys.
Sizes are bytes, durations seconds, money a ``Decimal`` of dollars.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import stat
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    CattrsError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from ruamel.yaml.scalarbool import ScalarBoolean

from mainsdk import arguments
from mainsdk.egress import from_config as egress_from_config
from mainsdk.entry_points import KNOWN_DRIVER_PACKAGES, config_section_names, driver_section_name, load_config_section
from mainsdk.errors import INVALID_OPTION, UNKNOWN_CONFIG_KEY, ConfigError, ConfigProblem, SandboxError
from mainsdk.hosts import validate_host_pattern
from mainsdk.packages import MAX_PACKAGES, check_unique, parse_pin
from mainsdk.secrets import Credential, SecretRef, SecretResolver
from mainsdk.units import (
    MAX_DISK,
    MAX_FILES,
    MAX_MEMORY,
    MAX_MONEY,
    MAX_OUTPUT,
    MAX_TIMEOUT,
    describe,
    parse_duration,
    parse_money,
    parse_size,
    printable,
)

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "MB",
    "AppConfig",
    "DiskPermissions",
    "DriverId",
    "Env",
    "Limits",
    "Packages",
    "Permissions",
    "SandboxConfig",
    "config_from_yaml",
    "install_hint",
    "item_position",
    "key_position",
    "load_config",
    "load_config_text",
    "parse_app_config",
    "parse_sandbox_config",
    "read_config_file",
    "read_yaml",
    "resolve_credentials",
    "structure_section",
    "undeclared_sections",
    "validate_sandbox_host",
]

DriverId = str
S = TypeVar("S", bound=attrs.AttrsInstance)
log = logging.getLogger("mainsdk")
DEFAULT_CONFIG_FILE = "main.yaml"
CONFIG_ENV_VAR = "MAINSDK_CONFIG"

MB = 1024 * 1024


def _bounded(key: str, maximum: float | Decimal, shown: str, *, whole: bool = False, zero: bool = False) -> Any:
    """An attrs validator: a number above 0 (or 0, with ``zero``) and at most ``maximum``, as the loader checks.

    The loader refuses such values with their line before building these classes; this refuses them when the
    classes are built by hand (``Limits(timeout=1e300)``), so no path reaches a driver with them.
    """

    def validate(_instance: object, _attribute: object, value: object) -> None:
        if value is None and zero:  # an optional amount of money: not set
            return
        kinds: tuple[type, ...] = (int,) if whole else (int, float, Decimal)
        number_ok = isinstance(value, kinds) and not isinstance(value, bool)
        # A Decimal NaN, quiet or signalling, is refused before it is compared: ``Decimal("sNaN") > 0`` raises.
        number_ok = number_ok and not (isinstance(value, Decimal) and not value.is_finite())
        in_range = number_ok and ((value >= 0) if zero else (value > 0)) and value <= maximum  # type: ignore[operator]
        if not in_range:  # NaN fails both comparisons
            least = "0 or more" if zero else "more than 0"
            kind = "a whole number" if whole else "a number"
            raise SandboxError(INVALID_OPTION, f"{key}: {describe(value)} must be {kind}, {least} and at most {shown}")

    return validate


@attrs.frozen
class Limits:
    """``sandbox.limits``: the most any run may use. A call may lower each, never raise it.

    Each is bounded (``mainsdk.units.LIMIT_MAXIMUMS``); building one past a bound raises MAIN-SANDBOX-0001.
    """

    timeout: float = attrs.field(default=30.0, validator=_bounded("sandbox.limits.timeout", MAX_TIMEOUT, "24h"))
    memory: int = attrs.field(
        default=512 * MB, validator=_bounded("sandbox.limits.memory", MAX_MEMORY, "1TB", whole=True)
    )
    output: int = attrs.field(
        default=1 * MB, validator=_bounded("sandbox.limits.output", MAX_OUTPUT, "1GB", whole=True)
    )
    files: int = attrs.field(default=50 * MB, validator=_bounded("sandbox.limits.files", MAX_FILES, "64GB", whole=True))
    max_cost: Decimal | None = attrs.field(  # dollars; key ``max-cost``
        default=None, validator=_bounded("sandbox.limits.max-cost", MAX_MONEY, "$1,000,000", zero=True)
    )


@attrs.frozen
class Packages:
    """``sandbox.packages``: the pinned packages (``name==version``) runs may use, per language.

    A run gets all of its language's by default, or the subset it names (``packages=[...]``), never more.
    """

    python: tuple[str, ...] = attrs.field(default=(), converter=tuple, validator=lambda _i, _a, v: _pins_by_hand(v))

    def for_language(self, language: str) -> tuple[str, ...]:
        """The packages configured for ``language`` (none for a language without the key)."""
        return self.python if language == "python" else ()


def _pins_by_hand(value: tuple[str, ...]) -> None:
    """Refuse, when ``Packages`` is built by hand, what the loader refuses with its line."""
    try:
        _package_list(list(value))
    except (CattrsError, ValueError, TypeError) as exc:
        messages = [str(sub) for sub in getattr(exc, "exceptions", ())] or [str(exc)]
        raise SandboxError(INVALID_OPTION, f"sandbox.packages.python: {'; '.join(messages)}") from None


IdleAction = Literal["close", "pause"]


@attrs.frozen
class Sessions:
    """``sandbox.sessions``: what an idle session does. ``on-idle: pause`` pauses it (on a driver that pauses,
    ``Capabilities.pause``; resumed by ``sandbox.resume``) where ``close`` (the default) ends it."""

    on_idle: IdleAction = "close"


@attrs.frozen
class SandboxConfig:
    """The ``sandbox`` section of ``main.yaml``, with every default filled."""

    driver: DriverId = "local"
    limits: Limits = attrs.field(factory=Limits)
    network: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    packages: Packages = attrs.field(factory=Packages)
    # Headers set at the egress for each host a run is given (``mainsdk.egress``): host -> header -> secret.
    egress: Mapping[str, Mapping[str, SecretRef]] = attrs.field(factory=dict)
    price: Decimal | None = attrs.field(  # dollars per second
        default=None, validator=_bounded("sandbox.price", MAX_MONEY, "$1,000,000", zero=True)
    )
    sessions: Sessions = attrs.field(factory=Sessions)  # what an idle session does (``sessions.on-idle``)
    # The drivers' own sections (``sandbox.e2b``), by key: the configured driver's as its declared attrs class,
    # checked with lines at load; others as written (checked by ``mainsdk check`` and when their driver loads).
    sections: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def on_idle(self) -> IdleAction:
        """``sandbox.sessions.on-idle``: "close" or "pause"."""
        return self.sessions.on_idle

    def section(self, name: str, cls: type[S]) -> S:
        """The section ``sandbox.<name>`` as ``cls`` (the driver's declared class); its defaults when absent.

        A section kept as written is checked now, raising the loader's ``ConfigError`` (without lines).
        """
        value = self.sections.get(name)
        if isinstance(value, cls):
            return value
        return structure_section(name, value, cls)


@attrs.frozen
class DiskPermissions:
    """``permissions.disk.temp.max``: the most a run's writable folders may hold."""

    temp_max: int = attrs.field(
        default=1024 * MB, validator=_bounded("permissions.disk.temp.max", MAX_DISK, "1TB", whole=True)
    )


@attrs.frozen
class Permissions:
    """``permissions``: what the app lets its own code do. ``processes`` is None when not configured."""

    processes: tuple[str, ...] | None = None
    disk: DiskPermissions = attrs.field(factory=DiskPermissions)


@attrs.frozen
class AppConfig:
    """What the sandbox reads of ``main.yaml``: its own section, ``network.allow`` and ``permissions``.

    ``source`` is the file it came from, or None for the embedded default.
    Other top-level sections belong to other MainSDK interfaces and are kept
    as they are in ``other``.
    """

    sandbox: SandboxConfig = attrs.field(factory=SandboxConfig)
    network_allow: tuple[str, ...] = ()
    permissions: Permissions = attrs.field(factory=Permissions)
    source: Path | None = None
    other: Mapping[str, Any] = attrs.field(factory=dict)


Env = Literal["development", "production"]


# --- Parsing -----------------------------------------------------------------

T = TypeVar("T")
KeyPath = tuple[str | int, ...]
Positions = Mapping[KeyPath, tuple[int, int]]
"""The 1-based (line, column) of each key or list item in a file, by its path from the top."""
_Issue = tuple[KeyPath, str, str]  # path, code, message

# YAML keys that are not the attribute name.
_RENAMES: dict[type, dict[str, str]] = {Limits: {"max_cost": "max-cost"}, Sessions: {"on_idle": "on-idle"}}
_DRIVER_ID = re.compile(r"[a-z0-9-]+")
_SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _problem(
    code: str, key: str, message: str, line: int | None = None, column: int | None = None, source: str | None = None
) -> ConfigProblem:
    """A problem whose key and message show unprintable characters escaped (they may quote the file's text)."""
    return ConfigProblem(code, printable(key), printable(message), line, column, source)


def _yaml_keys(cls: type[attrs.AttrsInstance]) -> list[str]:
    renames = _RENAMES.get(cls, {})
    return [renames.get(field.name, field.name) for field in attrs.fields(cls)]


def _text(value: object) -> str:
    # cattrs' default str hook would call str() and turn a list into "['a']".
    if not isinstance(value, str):
        quote = " (put it in quotes)" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""
        raise TypeError(f"expected text, not {describe(value)}{quote}")
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _driver_id(value: object) -> str:
    text = _text(value)
    if not _DRIVER_ID.fullmatch(text):
        raise ValueError(
            f"{describe(text)} is not a driver id: use lowercase letters, digits and -, like vercel-sandbox or e2b"
        )
    return text


def _on_idle(value: object) -> IdleAction:
    if value == "close":
        return "close"
    if value == "pause":
        return "pause"
    raise ValueError(f"{describe(value)} is not what an idle session does: use close (the default) or pause")


def _secret_name(value: object) -> str:
    text = _text(value)
    if not _SECRET_NAME.fullmatch(text):
        raise ValueError(
            f"{describe(text)} is not a secret name: use letters, digits and _, not starting with a digit, "
            "like OPENWEATHER_KEY"
        )
    return text


def _list_of(check: Callable[[object], str], example: str) -> Callable[[object], tuple[str, ...]]:
    """A structure function for a list whose items are each checked; every bad item is reported with its index."""

    def structure(value: object) -> tuple[str, ...]:
        if value is None:
            return ()
        # A bare string would otherwise be read as a list of its characters.
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list like [{example}], not {describe(value)}")
        items: list[str] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                items.append(check(item))
            except (ValueError, TypeError) as exc:
                exc.add_note(IterableValidationNote(f"item {index}", index, str))
                errors.append(exc)
        if errors:
            raise IterableValidationError("invalid list items", errors, tuple)
        return tuple(items)

    return structure


def validate_sandbox_host(value: object) -> str:
    """A host of ``sandbox.network``; ``localhost`` (and ``*.localhost``) is refused.

    A name is never let through to a loopback address: the local driver's proxy refuses one at run time (DNS
    rebinding onto the app's services), and on a microVM the name is the box itself, always reachable. Listed,
    it could only fail later, as a 403 in the run; the loopback address itself is what gives a run the app
    host's loopback, so the message names it. ``network.allow`` is the app's, shared with other interfaces:
    a ``localhost`` there is theirs, and the run still needs the host in ``sandbox.network`` too.
    """
    host = validate_host_pattern(value)
    if host == "localhost" or host.endswith(".localhost"):
        raise ValueError(
            f'"{host}" is a name for a loopback address, which a run is never let through to by name; to give '
            "runs the app host's own loopback (its local servers, on the local driver), list 127.0.0.1 or ::1 "
            "here and in network.allow instead"
        )
    return host


_host_list = _list_of(validate_host_pattern, "pypi.org")
_sandbox_host_list = _list_of(validate_sandbox_host, "pypi.org")
_secret_list = _list_of(_secret_name, "OPENWEATHER_KEY")
_text_list = _list_of(_text, "python3")
_pin_list = _list_of(lambda value: str(parse_pin(value)), "pandas==2.2.3")


def _package_list(value: object) -> tuple[str, ...]:
    """A language's pinned packages: each item pinned (refused with its index), no package twice, a bounded count."""
    pins = _pin_list(value)
    if len(pins) > MAX_PACKAGES:
        raise ValueError(f"{len(pins)} packages; a box may have at most {MAX_PACKAGES}")
    check_unique([parse_pin(pin) for pin in pins])
    return pins


def _or_none(parse: Callable[[object], T]) -> Callable[[object], T | None]:
    """``parse``, but null passes through as None (not configured)."""

    def parse_or_none(value: object) -> T | None:
        return None if value is None else parse(value)

    return parse_or_none


def _hook(parse: Callable[[object], T]) -> Callable[[object, object], T]:
    """A cattrs structure hook, called with (value, type), from a one-argument parser."""

    def hook(value: object, _type: object) -> T:
        return parse(value)

    return hook


def _section_hook(
    cls: type[attrs.AttrsInstance], structure: Callable[[Mapping[str, Any], Any], Any]
) -> Callable[[object, object], Any]:
    """Guard a generated structure function: null means all defaults, and anything but a mapping is refused."""

    def hook(value: object, _type: object) -> Any:
        if value is None:
            value = {}
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping with the keys {', '.join(_yaml_keys(cls))}, not {describe(value)}")
        return structure(value, cls)

    return hook


def _strict(kinds: tuple[type, ...], expected: str, convert: Callable[[Any], T]) -> Callable[[object], T]:
    """A scalar of ``kinds`` (a bool only where asked for: it is an int to Python), else a TypeError."""

    def parse(value: object) -> T:
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise TypeError(f"expected {expected}, not {describe(value)}")
        return convert(value)

    return parse


def _with_unit(parse: Callable[[object], T], example: str) -> Callable[[object], T]:
    """``parse``, refusing a bare number: in main.yaml ``timeout: 30`` or ``memory: 512`` says no unit (512 would be
    bytes), so the file must write one (a call's ``timeout=1.5`` stays seconds, as its docs say)."""

    def parse_with_unit(value: object) -> T:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"{value!r} has no unit; write it with one, like {example}")
        return parse(value)

    return parse_with_unit


def _build_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(str, _hook(_text))

    def section(cls: type[attrs.AttrsInstance], structure: Callable[[Mapping[str, Any], Any], Any]) -> None:
        converter.register_structure_hook(cls, _section_hook(cls, structure))

    # Strict scalars for the drivers' declared sections: cattrs' defaults would call int("7") and bool("no").
    converter.register_structure_hook(bool, _hook(_strict((bool,), "true or false", bool)))
    converter.register_structure_hook(int, _hook(_strict((int,), "a whole number", int)))
    converter.register_structure_hook(float, _hook(_strict((int, float), "a number", float)))
    converter.register_structure_hook(Credential, _hook(lambda value: Credential.from_text(_text(value))))
    section(Packages, make_dict_structure_fn(Packages, converter, python=override(struct_hook=_hook(_package_list))))

    def size(maximum: int) -> Any:
        return override(struct_hook=_hook(_with_unit(lambda value: parse_size(value, maximum=maximum), "512MB")))

    limits = make_dict_structure_fn(
        Limits,
        converter,
        timeout=override(
            struct_hook=_hook(_with_unit(lambda value: parse_duration(value, maximum=MAX_TIMEOUT), "30s"))
        ),
        memory=size(MAX_MEMORY),
        output=size(MAX_OUTPUT),
        files=size(MAX_FILES),
        max_cost=override(rename="max-cost", struct_hook=_hook(_or_none(parse_money))),
    )
    section(Limits, limits)
    section(
        Sessions,
        make_dict_structure_fn(Sessions, converter, on_idle=override(rename="on-idle", struct_hook=_hook(_on_idle))),
    )
    sandbox = make_dict_structure_fn(
        SandboxConfig,
        converter,
        driver=override(struct_hook=_hook(_driver_id)),
        network=override(struct_hook=_hook(_sandbox_host_list)),
        secrets=override(struct_hook=_hook(_secret_list)),
        egress=override(struct_hook=_hook(egress_from_config)),
        price=override(struct_hook=_hook(_or_none(parse_money))),
        sections=override(omit=True),
    )
    section(SandboxConfig, sandbox)
    return converter


_CONVERTER = _build_converter()


def _unknown_key_message(key: str, valid: list[str]) -> str:
    message = f"unknown key; the keys here are: {', '.join(valid)}"
    close = difflib.get_close_matches(key, valid, n=1)
    return message + (f'; did you mean "{close[0]}"?' if close else "")


def _collect(exc: BaseException, path: KeyPath, issues: list[_Issue]) -> None:
    """Flatten a nested cattrs error into issues with full key paths, keeping our own messages."""
    if isinstance(exc, ClassValidationError):
        with_names, others = exc.group_exceptions()
        for sub, name_note in with_names:
            _collect(sub, (*path, _RENAMES.get(exc.cl, {}).get(name_note.name, name_note.name)), issues)
        for sub in others:
            _collect(sub, path, issues)
    elif isinstance(exc, IterableValidationError):
        with_indexes, others = exc.group_exceptions()
        for sub, index_note in with_indexes:
            _collect(sub, (*path, index_note.index), issues)
        for sub in others:
            _collect(sub, path, issues)
    elif isinstance(exc, ForbiddenExtraKeysError) and exc.cl is SandboxConfig:  # core's keys and the drivers'
        valid = [*_CORE_SANDBOX_KEYS, *config_section_names()]
        for key in sorted(exc.extra_fields, key=str):
            issues.append(((*path, str(key)), UNKNOWN_CONFIG_KEY, _sandbox_key_message(str(key), valid)))
    elif isinstance(exc, ForbiddenExtraKeysError):
        valid = _yaml_keys(exc.cl)
        for key in sorted(exc.extra_fields, key=str):
            issues.append(((*path, str(key)), UNKNOWN_CONFIG_KEY, _unknown_key_message(str(key), valid)))
    elif isinstance(exc, (ValueError, TypeError)) and len(exc.args) > 1 and isinstance(exc.args[1], attrs.Attribute):
        # attrs' own validators (in_, instance_of, ...) name the field in args[1]: report it at the field's line
        issues.append(((*path, exc.args[1].name), INVALID_OPTION, str(exc.args[0])))
    elif isinstance(exc, SandboxError):  # a validator of a driver's section class, like core's own _bounded
        issues.append((path, exc.code, exc.message))
    elif isinstance(exc, KeyError) and path:  # cattrs: a field without a default that the file does not set
        issues.append((path, INVALID_OPTION, f"required: set {path[-1]} (it has no default)"))
    elif isinstance(exc, (ValueError, TypeError)):  # raised by our own checks, with a message for the user
        issues.append((path, INVALID_OPTION, str(exc)))
    else:
        issues.append((path, INVALID_OPTION, f"invalid value ({type(exc).__name__}: {exc})"))


def _read(issues: list[_Issue], path: KeyPath, structure: Callable[[Any], T], value: object, default: T) -> T:
    """Structure one value, recording its problems under ``path`` and falling back to ``default``."""
    try:
        return structure(value)
    except (CattrsError, ValueError, TypeError) as exc:
        _collect(exc, path, issues)
        return default


def _subsection(issues: list[_Issue], parent: Mapping[str, Any], path: KeyPath) -> Mapping[str, Any]:
    """The mapping at ``path[-1]`` of ``parent``; missing or null is empty, anything else is an issue."""
    value = parent.get(str(path[-1]))
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        issues.append((path, INVALID_OPTION, f"expected a mapping, not {describe(value)}"))
        return {}
    return value


# Outside ``sandbox:`` the sections are shared: ``network`` and ``permissions`` hold other interfaces' keys too
# (``network.proxy``, ``permissions.env``), and other top-level sections are the rest of the app's, kept in
# ``other`` and not judged. A key there this close to one the sandbox reads is a typo that would leave the
# sandbox on its defaults (``sandbx:`` running the local driver in production, ``alow:`` no host), and is
# refused with a did-you-mean; a key not this close belongs to someone else.
SANDBOX_SECTIONS = ("sandbox", "network", "permissions")
# difflib's ratio, on the key in lower case: a letter missing, extra or two swapped (sandbx, Sandbox, netwrok,
# procesess, alow, dsk, tmp); not networking, sandbox_id, max_processes, allowed, proxy or env.
NEAR_MISS_CUTOFF = 0.85


def near_miss(key: object, valid: tuple[str, ...]) -> str | None:
    """The key in ``valid`` that ``key`` looks like a misspelling of (case aside), or None."""
    if not isinstance(key, str) or key in valid:
        return None
    close = difflib.get_close_matches(key.strip().lower(), valid, n=1, cutoff=NEAR_MISS_CUTOFF)
    return close[0] if close else None


def _near_misses(issues: list[_Issue], section: Mapping[Any, Any], path: KeyPath, valid: tuple[str, ...]) -> None:
    """An unknown key, with its did-you-mean, for each key of a shared ``section`` that is a typo of ``valid``."""
    where = _dotted(path) if path else "the top level"
    for key in section:
        meant = near_miss(key, valid)
        if meant is not None:
            message = (
                f'unknown key; did you mean "{meant}"? ({where} is shared with the rest of the app: a key this '
                f"close to one the sandbox reads ({', '.join(valid)}) is taken for a typo)"
            )
            issues.append(((*path, str(key)), UNKNOWN_CONFIG_KEY, message))


def _unknown_keys(issues: list[_Issue], section: Mapping[Any, Any], path: KeyPath, valid: tuple[str, ...]) -> None:
    """An unknown key for each key of ``section``, one the sandbox reads whole, that is not in ``valid``."""
    for key in section:
        if key in valid:
            continue
        meant = near_miss(key, valid)
        hint = f'did you mean "{meant}"? ' if meant else ""
        message = f"unknown key; {hint}{_dotted(path)} takes only {', '.join(valid)}"
        issues.append(((*path, str(key)), UNKNOWN_CONFIG_KEY, message))


def _dotted(path: KeyPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or DEFAULT_CONFIG_FILE


def _config_error(issues: list[_Issue], source: str | os.PathLike[str] | None, lines: Positions | None) -> ConfigError:
    """One ConfigError for all issues, each placed at its key's line (or its nearest parent's), in file order."""
    problems = []
    for path, code, message in issues:
        position = None
        for depth in range(len(path), -1, -1):
            position = (lines or {}).get(path[:depth])
            if position is not None:
                break
        line, column = position or (None, None)
        source_text = None if source is None else str(source)
        problems.append(_problem(code, _dotted(path), message, line, column, source_text))
    problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
    return ConfigError(problems)


_CORE_SANDBOX_KEYS = tuple(field.name for field in attrs.fields(SandboxConfig) if field.name != "sections")
_DECLARED: set[type] = set()  # the drivers' section classes the converter has a hook for


def _structure_declared(value: object, cls: type[S]) -> S:
    if cls not in _DECLARED:  # generated once per class; forbid_extra_keys gives the did-you-mean
        _CONVERTER.register_structure_hook(cls, _section_hook(cls, make_dict_structure_fn(cls, _CONVERTER)))
        _DECLARED.add(cls)
    return _CONVERTER.structure(value, cls)


def structure_section(name: str, value: object, cls: type[S]) -> S:
    """``value`` (the mapping under ``sandbox.<name>``, or None for defaults) as the driver's class ``cls``.

    Checked as the loader checks core's own keys: an unknown key (with a did-you-mean), a wrong type or a
    value the class's validators refuse is a ``ConfigError`` naming ``sandbox.<name>.<key>``.
    """
    issues: list[_Issue] = []
    section = _read(issues, ("sandbox", name), lambda raw: _structure_declared(raw, cls), value, None)
    if issues or section is None:
        raise _config_error(issues, None, None)
    return section


def install_hint(name: str) -> str:
    """What to install to check the section ``sandbox.<name>``: `` (pip install mainsdk-e2b)`` for ours, else ``""``."""
    package = KNOWN_DRIVER_PACKAGES.get(name) or KNOWN_DRIVER_PACKAGES.get(f"{name}-sandbox")
    return f" (pip install {package})" if package else ""


def _sandbox_key_message(name: str, valid: list[str]) -> str:
    if difflib.get_close_matches(name, valid, n=1):
        return _unknown_key_message(name, valid)
    return _unknown_key_message(name, valid) + f"; if it is a driver's section, install that driver{install_hint(name)}"


def _structure_sandbox(raw: object, *, every_section: bool = False) -> SandboxConfig:
    """``sandbox:`` with the configured driver's own section checked through the class the driver declares.

    Core knows only its own keys. Another key is a driver's section (``mainsdk.driver_configs``): the
    configured driver's is imported and checked here; another installed driver's is kept as written
    (core imports only the configured driver); one no installed driver declares is kept with a warning,
    unless it looks like a misspelt key or is not a mapping, which is refused as unknown.
    ``every_section`` checks every installed driver's section, importing each (``mainsdk check``).
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        keys = ", ".join([*_CORE_SANDBOX_KEYS, *config_section_names()])
        raise TypeError(f"expected a mapping with the keys {keys}, not {describe(raw)}")
    extra = {str(key): value for key, value in raw.items() if key not in _CORE_SANDBOX_KEYS}
    core = {key: value for key, value in raw.items() if key in _CORE_SANDBOX_KEYS}
    if not extra:
        return _CONVERTER.structure(core, SandboxConfig)
    errors: list[Exception] = []
    config = SandboxConfig()
    try:
        config = _CONVERTER.structure(core, SandboxConfig)
    except ClassValidationError as exc:  # reported with the sections' problems, all at once
        errors.extend(exc.exceptions)
    driver = raw.get("driver", config.driver)
    installed = config_section_names()
    valid = [*_CORE_SANDBOX_KEYS, *installed]
    configured = driver_section_name(driver) if isinstance(driver, str) and _DRIVER_ID.fullmatch(driver) else None
    sections: dict[str, Any] = {}
    for name, value in extra.items():
        try:
            if name == configured or (every_section and name in installed):
                cls = load_config_section(name)
                if cls is not None:
                    sections[name] = _structure_declared(value, cls)
                    continue
            if name in installed:
                if value is not None and not isinstance(value, Mapping):
                    raise TypeError(f"expected a mapping (the {name} driver's section), not {describe(value)}")
                sections[name] = {} if value is None else value
                continue
            if difflib.get_close_matches(name, valid, n=1) or not isinstance(value, Mapping):
                errors.append(ForbiddenExtraKeysError("", SandboxConfig, {name}))
                continue
            log.warning(
                "main.yaml: sandbox.%s is not checked: no installed driver declares that section%s",
                printable(name),
                install_hint(name),
            )
            sections[name] = value
        except (CattrsError, ValueError, TypeError, SandboxError) as exc:
            exc.add_note(AttributeValidationNote(f"section {name}", name, object))
            errors.append(exc)
    if errors:
        raise ClassValidationError("invalid driver sections", errors, SandboxConfig)
    return attrs.evolve(config, sections=sections)


def undeclared_sections(config: AppConfig) -> list[str]:
    """The ``sandbox.<name>`` sections in ``config`` that no installed driver declares: kept as written, unchecked."""
    installed = set(config_section_names())
    return sorted(name for name in config.sandbox.sections if name not in installed)


def resolve_credentials(config: AppConfig, name: str, cls: type[S], resolver: SecretResolver) -> AppConfig:
    """``config`` with every ``Credential`` field of ``sandbox.<name>`` looked up through ``resolver``.

    Core does this for the configured driver before building it, the same for every driver; the values
    live only in the returned config's credentials, whose repr never shows them.
    """
    section: Any = config.sandbox.section(name, cls)  # Any: attrs.evolve cannot take a TypeVar
    resolved = {
        field.name: value.resolve(resolver, f"sandbox.{name}.{field.name}")
        for field in attrs.fields(cls)
        if isinstance(value := getattr(section, field.name), Credential)
    }
    sections = {**config.sandbox.sections, name: attrs.evolve(section, **resolved)}
    return attrs.evolve(config, sandbox=attrs.evolve(config.sandbox, sections=sections))


@arguments.checked_function("parse_sandbox_config")
def parse_sandbox_config(
    raw: object, *, source: str | os.PathLike[str] | None = None, lines: Positions | None = None
) -> SandboxConfig:
    """Parse the mapping under ``sandbox:`` (None or ``{}`` gives every default).

    Raises one ``ConfigError`` listing every problem: MAIN-CONFIG-0003 for an
    unknown key, MAIN-SANDBOX-0001 for an invalid value, each with its dotted
    key (``sandbox.limits.timeout``) and, when ``lines`` is given, its line.
    """
    issues: list[_Issue] = []
    config = _read(issues, ("sandbox",), _structure_sandbox, raw, SandboxConfig())
    if issues:
        raise _config_error(issues, source, lines)
    return config


@arguments.checked_function("parse_app_config")
def parse_app_config(
    raw: object,
    *,
    source: str | os.PathLike[str] | None = None,
    lines: Positions | None = None,
    every_section: bool = False,
) -> AppConfig:
    """Parse a whole ``main.yaml`` mapping into the parts the sandbox reads.

    Reads ``sandbox``, ``network.allow``, ``permissions.processes`` and
    ``permissions.disk.temp.max``. Other keys are not the sandbox's to judge:
    every top-level section but ``sandbox`` is kept as it is in ``other``.
    Raises one ``ConfigError`` listing every problem found. ``every_section`` also checks the sections
    of installed drivers other than the configured one (importing their config classes).
    """
    if raw is None:  # an empty file
        raw = {}
    issues: list[_Issue] = []
    if not isinstance(raw, Mapping):
        issues.append(
            ((), INVALID_OPTION, f"the top level must be a mapping of sections like sandbox:, not {describe(raw)}")
        )
        raise _config_error(issues, source, lines)

    sandbox = _read(
        issues,
        ("sandbox",),
        lambda value: _structure_sandbox(value, every_section=every_section),
        raw.get("sandbox"),
        SandboxConfig(),
    )
    network = _subsection(issues, raw, ("network",))
    no_hosts: tuple[str, ...] = ()
    network_allow = _read(issues, ("network", "allow"), _host_list, network.get("allow"), no_hosts)

    permissions = _subsection(issues, raw, ("permissions",))
    processes = _read(issues, ("permissions", "processes"), _or_none(_text_list), permissions.get("processes"), None)
    disk = _subsection(issues, permissions, ("permissions", "disk"))
    temp = _subsection(issues, disk, ("permissions", "disk", "temp"))
    temp_max = _read(
        issues,
        ("permissions", "disk", "temp", "max"),
        _or_none(lambda value: parse_size(value, maximum=MAX_DISK)),
        temp.get("max"),
        None,
    )

    # A typo of a key the sandbox reads, outside ``sandbox:``, is never silently a default (see SANDBOX_SECTIONS).
    _near_misses(issues, raw, (), SANDBOX_SECTIONS)
    _near_misses(issues, network, ("network",), ("allow",))
    _near_misses(issues, permissions, ("permissions",), ("processes", "disk"))
    # permissions.disk is the sandbox's whole (the spec gives it temp.max and nothing else): checked as sandbox: is.
    _unknown_keys(issues, disk, ("permissions", "disk"), ("temp",))
    _unknown_keys(issues, temp, ("permissions", "disk", "temp"), ("max",))

    if issues:
        raise _config_error(issues, source, lines)
    return AppConfig(
        sandbox=sandbox,
        network_allow=network_allow,
        permissions=Permissions(processes, DiskPermissions() if temp_max is None else DiskPermissions(temp_max)),
        source=None if source is None else Path(source),
        other={str(key): value for key, value in raw.items() if key != "sandbox"},
    )


# Bounds on the YAML itself, checked on the event stream before anything is built, so that no file
# can take long or much memory to refuse: a real main.yaml is a few hundred nodes, a few levels deep.
MAX_CONFIG_BYTES = 64 * 1024  # the YAML reader takes about a second for 200KB here
MAX_CONFIG_NODES = 5_000  # scalars and collections, counting each alias as the nodes it repeats
MAX_CONFIG_DEPTH = 32
_MAX_OPENERS_PER_LINE = 256
_MAX_NUMBER_CHARS = 100  # a longer number is a typo; int() refuses past 4300 digits with a raw ValueError
_CORE_TAG = "tag:yaml.org,2002:"
# The only explicit tags read: the core schema's. Others (!!python/..., !!binary, !!set, !!timestamp, !custom)
# mean nothing to the sandbox, and one ignored silently would make a value other than what was written.
_ALLOWED_TAGS = frozenset(_CORE_TAG + name for name in ("str", "int", "float", "bool", "null", "seq", "map"))
_NUMBER_LIKE = re.compile(r"[-+]?\.?[0-9][0-9a-fA-F_:.eExXoO+-]*")


class _Frame:
    """An open mapping or sequence in the event stream: its key path, anchor, size and depth so far."""

    __slots__ = ("anchor", "depth", "is_mapping", "key", "nodes", "slot")

    def __init__(self, anchor: str | None, is_mapping: bool) -> None:
        self.anchor = anchor
        self.is_mapping = is_mapping
        self.nodes = 0  # the nodes inside it, aliases expanded (itself is counted in its parent)
        self.depth = 1  # levels of collections, itself included
        self.slot = 0  # the index of the next item (in a mapping: keys and values alternate)
        self.key: str | int | None = None  # the key the next value belongs to


def _structure_problem(message: str, mark: Any, path: KeyPath, source: str | os.PathLike[str] | None) -> ConfigError:
    line = column = None
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
    source_text = None if source is None else str(source)
    key = _dotted(path[:12]) + ("..." if len(path) > 12 else "")
    return ConfigError([_problem(INVALID_OPTION, key, message, line, column, source_text)])


def _check_yaml_shape(text: str, source: str | os.PathLike[str] | None) -> None:
    """Refuse, from the event stream alone, YAML too deep, too large or with aliases that expand too far.

    An alias is counted as every node it repeats, so an alias bomb (each level
    repeating the last ten times) is refused at the alias that passes the
    bound, after reading a few hundred bytes, instead of being built in memory.
    Also refuses an alias to a collection that is still open (it would
    repeat itself forever), numbers too long to be a value, and tags other
    than the core schema's (``!!python/...``, ``!!binary``, ``!custom``).
    """
    frames: list[_Frame] = []
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (nodes it holds, depth)
    total = 0

    def path() -> KeyPath:
        parts: list[str | int] = []
        for frame in frames:
            if not frame.is_mapping:
                parts.append(frame.slot)
            elif frame.key is not None:
                parts.append(frame.key)
            else:
                break  # at a key of this mapping: the path ends at the mapping
        return tuple(parts)

    def refuse(message: str, event: Any) -> ConfigError:
        return _structure_problem(message, event.start_mark, path(), source)

    def added(nodes: int, depth: int, event: Any) -> None:
        nonlocal total
        total += nodes
        if total > MAX_CONFIG_NODES:
            how = "with what its aliases repeat, " if anchors else ""
            raise refuse(
                f"the file holds more than {MAX_CONFIG_NODES} values ({how}counted up to here); "
                "a main.yaml needs far fewer: remove the repetition",
                event,
            )
        if len(frames) + depth > MAX_CONFIG_DEPTH:
            raise refuse(f"nested more than {MAX_CONFIG_DEPTH} levels deep; a main.yaml needs a few", event)
        if frames:
            frames[-1].nodes += nodes
            frames[-1].depth = max(frames[-1].depth, depth + 1)

    def item_done(key_text: str | None) -> None:
        if not frames:
            return
        frame = frames[-1]
        if frame.is_mapping:
            if frame.slot % 2 == 0:
                frame.key = key_text if key_text is not None else f"<key {frame.slot // 2}>"
            else:
                frame.key = None
        frame.slot += 1

    for event in YAML(typ="rt").parse(text):
        tag = getattr(event, "tag", None)
        if tag is not None and tag not in _ALLOWED_TAGS:
            shown = "!!" + tag.removeprefix(_CORE_TAG) if tag.startswith(_CORE_TAG) else tag
            raise refuse(
                f"the tag {shown[:80]} means nothing in a main.yaml: remove it "
                "(the tags read are !!str, !!int, !!float, !!bool, !!null, !!seq and !!map)",
                event,
            )
        if isinstance(event, ScalarEvent):
            value = event.value or ""
            plain_or_tagged = event.style is None or event.tag is not None
            if plain_or_tagged and len(value) > _MAX_NUMBER_CHARS and _NUMBER_LIKE.fullmatch(value.strip()):
                raise refuse(
                    f"a number of {len(value)} characters is not a value any key takes; "
                    "if it is text, put it in quotes",
                    event,
                )
            added(1, 0, event)
            if event.anchor:
                anchors[event.anchor] = (1, 0)
            item_done(value)
        elif isinstance(event, AliasEvent):
            if any(frame.anchor == event.anchor for frame in frames):
                raise refuse(
                    f"the alias *{event.anchor} is inside the &{event.anchor} it repeats, "
                    "so it would repeat itself forever",
                    event,
                )
            nodes, depth = anchors.get(event.anchor, (1, 0))  # an unknown anchor: the loader names it
            added(nodes, depth, event)
            item_done(None)
        elif isinstance(event, (MappingStartEvent, SequenceStartEvent)):
            added(1, 1, event)
            frames.append(_Frame(event.anchor, isinstance(event, MappingStartEvent)))
        elif isinstance(event, (MappingEndEvent, SequenceEndEvent)):
            frame = frames.pop()
            if frame.anchor:
                anchors[frame.anchor] = (frame.nodes + 1, frame.depth)
            if frames:  # what it holds counts in every collection around it, an anchored one above all
                frames[-1].nodes += frame.nodes
                frames[-1].depth = max(frames[-1].depth, frame.depth + 1)
            item_done(None)


def read_yaml(text: str, *, source: str | os.PathLike[str] | None = None) -> Any:
    """The round-trip YAML tree of a ``main.yaml`` text, or a ``ConfigError`` saying why it cannot be read.

    Refuses a file over ``MAX_CONFIG_BYTES``, nested deeper than
    ``MAX_CONFIG_DEPTH``, or holding more than ``MAX_CONFIG_NODES`` values once
    its aliases are expanded, each with the line; never a raw exception.
    """
    source_text = None if source is None else str(source)
    if len(text) > MAX_CONFIG_BYTES:
        message = f"the file is {len(text):,} characters; a main.yaml may be at most {MAX_CONFIG_BYTES:,}"
        raise ConfigError([_problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, message, source=source_text)])
    for number, line in enumerate(text.splitlines(), 1):
        # The YAML scanner looks up to 1024 characters ahead at every [ or { it meets on a line, so a line of
        # thousands of them takes seconds to refuse; no real line opens more than a few.
        if line.count("[") + line.count("{") > _MAX_OPENERS_PER_LINE:
            message = f"line {number} opens more than {_MAX_OPENERS_PER_LINE} [ and {{; a main.yaml needs a few"
            raise ConfigError([_problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, message, number, 1, source_text)])
    try:
        _check_yaml_shape(text, source)
        return YAML(typ="rt").load(text)
    except YAMLError as exc:
        raise ConfigError([_syntax_problem(exc, source)]) from None
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - the YAML library's own failures on odd input, reported not raised
        message = f"not valid YAML: the YAML reader failed ({type(exc).__name__}: {str(exc)[:200]})"
        raise ConfigError([_problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, message, source=source_text)]) from None


def _node_position(node: CommentedMap | CommentedSeq) -> tuple[int, int]:
    return node.lc.line or 0, node.lc.col or 0


def key_position(node: CommentedMap, key: object) -> tuple[int, int]:
    """The 0-based (line, column) where ``key`` is written: in ``node``, or in the mapping a ``<<:`` merged in."""
    data = node.lc.data or {}  # None for a mapping built from a tag such as !!omap
    if key in data:
        line, column = data[key][:2]
        return line, column
    for merged in node.merge:  # the mappings ``<<:`` merged in, as ruamel resolved them
        if isinstance(merged, CommentedMap) and key in merged:
            return key_position(merged, key)
    return _node_position(node)


def item_position(node: CommentedSeq, index: int) -> tuple[int, int]:
    """The 0-based (line, column) of item ``index``; the sequence's own for one built from a tag."""
    data = node.lc.data or {}
    if index in data:
        line, column = data[index][:2]
        return line, column
    return _node_position(node)


def _plain(node: object, path: KeyPath, lines: dict[KeyPath, tuple[int, int]]) -> Any:
    """Plain Python from ruamel's round-trip nodes, recording each key's and item's 1-based position in ``lines``.

    Keys a ``<<:`` merge key brings in are placed where the merged mapping writes them.
    """
    if isinstance(node, CommentedMap):
        mapping = {}
        for key, value in node.items():
            line, column = key_position(node, key)
            lines[(*path, str(key))] = (line + 1, column + 1)
            mapping[key] = _plain(value, (*path, str(key)), lines)
        return mapping
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            line, column = item_position(node, index)
            lines[(*path, index)] = (line + 1, column + 1)
            items.append(_plain(value, (*path, index), lines))
        return items
    if isinstance(node, TaggedScalar):  # ruamel keeps an explicit !!str as a tagged scalar; the text is the value
        return str(node.value)
    if isinstance(node, (bool, ScalarBoolean)):
        return bool(node)
    for kind in (int, float, str):  # ScalarInt, ScalarFloat, the ScalarString kinds
        if isinstance(node, kind):
            return kind(node)
    return node


def _syntax_problem(exc: YAMLError, source: str | os.PathLike[str] | None) -> ConfigProblem:
    line = column = None
    detail = str(exc)
    if isinstance(exc, MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            line, column = mark.line + 1, mark.column + 1
        detail = f"{exc.problem} ({exc.context})" if exc.context else str(exc.problem)
    source_text = None if source is None else str(source)
    return _problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, f"not valid YAML: {detail}", line, column, source_text)


@arguments.checked_function("load_config_text")
def load_config_text(text: str, *, source: str | os.PathLike[str] | None = None) -> AppConfig:
    """Parse ``main.yaml`` text; every problem carries its line, and a YAML syntax error the line of the mistake.

    Merge keys (``<<: *defaults``) work as YAML defines them. Whatever the
    text, the answer is an ``AppConfig`` or a ``ConfigError`` (see ``read_yaml``
    for the bounds on size, depth and aliases).
    """
    return config_from_yaml(read_yaml(text, source=source), source=source)


def config_from_yaml(
    document: Any, *, source: str | os.PathLike[str] | None = None, every_section: bool = False
) -> AppConfig:
    """The config from a round-trip tree that ``read_yaml`` returned, with each problem at its line.

    ``every_section``: check every installed driver's section, not only the configured driver's.
    """
    lines: dict[KeyPath, tuple[int, int]] = {}
    if isinstance(document, (CommentedMap, CommentedSeq)):
        line, column = _node_position(document)
        lines[()] = (line + 1, column + 1)
    raw = _plain(document, (), lines)
    return parse_app_config(raw, source=source, lines=lines, every_section=every_section)


def _config_file(path: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    if path is not None:
        return path
    from_env = os.environ.get(CONFIG_ENV_VAR)
    if from_env:
        if not Path(from_env).is_file():
            problem = _problem(
                INVALID_OPTION,
                CONFIG_ENV_VAR,
                f"names {from_env}, which is not a file: point it at your main.yaml, or unset it",
                source=from_env,
            )
            raise ConfigError([problem])
        return from_env
    return DEFAULT_CONFIG_FILE if Path(DEFAULT_CONFIG_FILE).is_file() else None


def read_config_file(path: str | os.PathLike[str]) -> str:
    """The text of a config file, reading no more than a main.yaml may hold (never all of /dev/zero or 1GB).

    Raises ``OSError`` or ``UnicodeDecodeError`` as reading does, and a ``ConfigError`` for a file too large
    or not a regular file (a FIFO blocked the open, a device never ends).
    """
    limit = 4 * MAX_CONFIG_BYTES  # UTF-8 takes at most 4 bytes a character
    # O_NONBLOCK: opening a FIFO waits for a writer (``--config`` naming one hung the CLI); it is refused
    # by what fstat says of the open file, with no window for a swap between a check and the open.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            message = "not a regular file (a FIFO, a device or a folder); name your main.yaml"
            raise ConfigError([_problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, message, source=str(path))])
        os.set_blocking(fd, True)
        data = file.read(limit + 1)
    if len(data) > limit:
        message = f"the file is over {limit:,} bytes; a main.yaml may be at most {MAX_CONFIG_BYTES:,} characters"
        raise ConfigError([_problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, message, source=str(path))])
    return data.decode("utf-8")


_said: set[str] = set()  # each config file (or "none") is said once per process


def _say_which_file(file: str | os.PathLike[str] | None, how: str) -> None:
    """INFO, once: the file read (and how it was found), or that none was and the defaults hold, and how to name one."""
    key = str(Path(file).resolve()) if file is not None else f"none in {Path.cwd()}"
    if key in _said:
        return
    _said.add(key)
    if file is not None:
        log.info("mainsdk: read the config from %s (found through %s)", key, how)
    else:
        log.info(
            "mainsdk: no %s in the current folder (%s) and %s unset: using the defaults (the local driver, default "
            "limits, no network, no secrets); point at a file with %s=/path/to/main.yaml or load_config(path)",
            DEFAULT_CONFIG_FILE,
            Path.cwd(),
            CONFIG_ENV_VAR,
            CONFIG_ENV_VAR,
        )


@arguments.checked_function("load_config")
def load_config(path: str | os.PathLike[str] | None = None) -> AppConfig:
    """Load ``main.yaml`` from ``path``, else ``$MAINSDK_CONFIG``, else ``./main.yaml``.

    With none of them (and MAINSDK_CONFIG unset) this is the embedded default
    ``AppConfig()``: the ``local`` driver, default limits, no network.
    """
    file = _config_file(path)
    how = "the path given" if path is not None else CONFIG_ENV_VAR if os.environ.get(CONFIG_ENV_VAR) else "./main.yaml"
    _say_which_file(file, how)
    if file is None:
        return AppConfig()
    try:
        text = read_config_file(file)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        problem = _problem(INVALID_OPTION, DEFAULT_CONFIG_FILE, f"cannot read {file}: {reason}", source=str(file))
        raise ConfigError([problem]) from None
    return load_config_text(text, source=file)
