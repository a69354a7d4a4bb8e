"""The parsed ``main.yaml``: the ``sandbox`` section and the parts of the app config it reads.

Frozen attrs classes, built by a cattrs converter that refuses unknown keys.
Sizes are bytes, durations seconds, money a ``Decimal`` of dollars.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    CattrsError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, override
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.scalarbool import ScalarBoolean

from mainsdk.errors import INVALID_OPTION, UNKNOWN_CONFIG_KEY, ConfigError, ConfigProblem
from mainsdk.hosts import validate_host_pattern
from mainsdk.units import describe, parse_duration, parse_money, parse_size

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "MB",
    "AppConfig",
    "DiskPermissions",
    "DriverId",
    "E2BConfig",
    "Env",
    "Limits",
    "LocalPrograms",
    "Permissions",
    "SandboxConfig",
    "VercelConfig",
    "load_config",
    "load_config_text",
    "parse_app_config",
    "parse_sandbox_config",
]

DriverId = str
DEFAULT_CONFIG_FILE = "main.yaml"
CONFIG_ENV_VAR = "MAINSDK_CONFIG"

MB = 1024 * 1024


@attrs.frozen
class Limits:
    """``sandbox.limits``: the most any run may use. A call may lower each, never raise it."""

    timeout: float = 30.0  # seconds
    memory: int = 512 * MB  # bytes
    output: int = 1 * MB  # bytes, stdout and stderr together
    files: int = 50 * MB  # bytes, files in and files out, each direction
    max_cost: Decimal | None = None  # dollars; key ``max-cost``


@attrs.frozen
class LocalPrograms:
    """``sandbox.local``: the interpreter for each language on the ``local`` driver."""

    python: str = "python3"
    node: str = "node"
    bash: str = "bash"


@attrs.frozen
class VercelConfig:
    """``sandbox.vercel``."""

    token: str = "secret:VERCEL_TOKEN"
    project: str | None = None
    team: str | None = None
    runtime: str | None = None


@attrs.frozen
class E2BConfig:
    """``sandbox.e2b``."""

    key: str = "secret:E2B_API_KEY"
    template: str | None = None


@attrs.frozen
class SandboxConfig:
    """The ``sandbox`` section of ``main.yaml``, with every default filled."""

    driver: DriverId = "local"
    limits: Limits = attrs.field(factory=Limits)
    network: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()
    local: LocalPrograms = attrs.field(factory=LocalPrograms)
    vercel: VercelConfig = attrs.field(factory=VercelConfig)
    e2b: E2BConfig = attrs.field(factory=E2BConfig)
    price: Decimal | None = None  # dollars per second


@attrs.frozen
class DiskPermissions:
    """``permissions.disk.temp.max``: the most a run's writable folders may hold."""

    temp_max: int = 1024 * MB


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
_RENAMES: dict[type, dict[str, str]] = {Limits: {"max_cost": "max-cost"}}
_DRIVER_ID = re.compile(r"[a-z0-9-]+")
_SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
            f'"{text}" is not a driver id: use lowercase letters, digits and -, like vercel-sandbox or e2b'
        )
    return text


def _secret_name(value: object) -> str:
    text = _text(value)
    if not _SECRET_NAME.fullmatch(text):
        raise ValueError(
            f'"{text}" is not a secret name: use letters, digits and _, not starting with a digit, like OPENWEATHER_KEY'
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


_host_list = _list_of(validate_host_pattern, "pypi.org")
_secret_list = _list_of(_secret_name, "OPENWEATHER_KEY")
_text_list = _list_of(_text, "python3")


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


def _build_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(str, _hook(_text))

    def section(cls: type[attrs.AttrsInstance], structure: Callable[[Mapping[str, Any], Any], Any]) -> None:
        converter.register_structure_hook(cls, _section_hook(cls, structure))

    # The sections come before SandboxConfig so that its structure function finds their hooks.
    for cls in (LocalPrograms, VercelConfig, E2BConfig):
        section(cls, make_dict_structure_fn(cls, converter))
    size = override(struct_hook=_hook(parse_size))
    limits = make_dict_structure_fn(
        Limits,
        converter,
        timeout=override(struct_hook=_hook(parse_duration)),
        memory=size,
        output=size,
        files=size,
        max_cost=override(rename="max-cost", struct_hook=_hook(_or_none(parse_money))),
    )
    section(Limits, limits)
    sandbox = make_dict_structure_fn(
        SandboxConfig,
        converter,
        driver=override(struct_hook=_hook(_driver_id)),
        network=override(struct_hook=_hook(_host_list)),
        secrets=override(struct_hook=_hook(_secret_list)),
        price=override(struct_hook=_hook(_or_none(parse_money))),
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
    elif isinstance(exc, ForbiddenExtraKeysError):
        valid = _yaml_keys(exc.cl)
        for key in sorted(exc.extra_fields, key=str):
            issues.append(((*path, str(key)), UNKNOWN_CONFIG_KEY, _unknown_key_message(str(key), valid)))
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
        problems.append(ConfigProblem(code, _dotted(path), message, line, column, source_text))
    problems.sort(key=lambda p: (p.line is None, p.line or 0, p.column or 0))
    return ConfigError(problems)


def _structure_sandbox(raw: object) -> SandboxConfig:
    return _CONVERTER.structure(raw, SandboxConfig)


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


def parse_app_config(
    raw: object, *, source: str | os.PathLike[str] | None = None, lines: Positions | None = None
) -> AppConfig:
    """Parse a whole ``main.yaml`` mapping into the parts the sandbox reads.

    Reads ``sandbox``, ``network.allow``, ``permissions.processes`` and
    ``permissions.disk.temp.max``. Other keys are not the sandbox's to judge:
    every top-level section but ``sandbox`` is kept as it is in ``other``.
    Raises one ``ConfigError`` listing every problem found.
    """
    if raw is None:  # an empty file
        raw = {}
    issues: list[_Issue] = []
    if not isinstance(raw, Mapping):
        issues.append(
            ((), INVALID_OPTION, f"the top level must be a mapping of sections like sandbox:, not {describe(raw)}")
        )
        raise _config_error(issues, source, lines)

    sandbox = _read(issues, ("sandbox",), _structure_sandbox, raw.get("sandbox"), SandboxConfig())
    network = _subsection(issues, raw, ("network",))
    no_hosts: tuple[str, ...] = ()
    network_allow = _read(issues, ("network", "allow"), _host_list, network.get("allow"), no_hosts)

    permissions = _subsection(issues, raw, ("permissions",))
    processes = _read(issues, ("permissions", "processes"), _or_none(_text_list), permissions.get("processes"), None)
    disk = _subsection(issues, permissions, ("permissions", "disk"))
    temp = _subsection(issues, disk, ("permissions", "disk", "temp"))
    temp_max = _read(issues, ("permissions", "disk", "temp", "max"), _or_none(parse_size), temp.get("max"), None)

    if issues:
        raise _config_error(issues, source, lines)
    return AppConfig(
        sandbox=sandbox,
        network_allow=network_allow,
        permissions=Permissions(processes, DiskPermissions() if temp_max is None else DiskPermissions(temp_max)),
        source=None if source is None else Path(source),
        other={str(key): value for key, value in raw.items() if key != "sandbox"},
    )


def _plain(node: object, path: KeyPath, lines: dict[KeyPath, tuple[int, int]]) -> Any:
    """Plain Python from ruamel's round-trip nodes, recording each key's and item's 1-based position in ``lines``."""
    if isinstance(node, CommentedMap):
        mapping = {}
        for key, value in node.items():
            line, column = node.lc.key(key)
            lines[(*path, str(key))] = (line + 1, column + 1)
            mapping[key] = _plain(value, (*path, str(key)), lines)
        return mapping
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            line, column = node.lc.item(index)
            lines[(*path, index)] = (line + 1, column + 1)
            items.append(_plain(value, (*path, index), lines))
        return items
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
    return ConfigProblem(INVALID_OPTION, DEFAULT_CONFIG_FILE, f"not valid YAML: {detail}", line, column, source_text)


def load_config_text(text: str, *, source: str | os.PathLike[str] | None = None) -> AppConfig:
    """Parse ``main.yaml`` text; every problem carries its line, and a YAML syntax error the line of the mistake."""
    try:
        document = YAML(typ="rt").load(text)
    except YAMLError as exc:
        raise ConfigError([_syntax_problem(exc, source)]) from None
    lines: dict[KeyPath, tuple[int, int]] = {}
    if isinstance(document, (CommentedMap, CommentedSeq)):
        lines[()] = (document.lc.line + 1, document.lc.col + 1)
    raw = _plain(document, (), lines)
    return parse_app_config(raw, source=source, lines=lines)


def _config_file(path: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    if path is not None:
        return path
    from_env = os.environ.get(CONFIG_ENV_VAR)
    if from_env:
        if not Path(from_env).is_file():
            problem = ConfigProblem(
                INVALID_OPTION,
                CONFIG_ENV_VAR,
                f"names {from_env}, which is not a file: point it at your main.yaml, or unset it",
                source=from_env,
            )
            raise ConfigError([problem])
        return from_env
    return DEFAULT_CONFIG_FILE if Path(DEFAULT_CONFIG_FILE).is_file() else None


def load_config(path: str | os.PathLike[str] | None = None) -> AppConfig:
    """Load ``main.yaml`` from ``path``, else ``$MAINSDK_CONFIG``, else ``./main.yaml``.

    With none of them (and MAINSDK_CONFIG unset) this is the embedded default
    ``AppConfig()``: the ``local`` driver, default limits, no network.
    """
    file = _config_file(path)
    if file is None:
        return AppConfig()
    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        problem = ConfigProblem(INVALID_OPTION, DEFAULT_CONFIG_FILE, f"cannot read {file}: {reason}", source=str(file))
        raise ConfigError([problem]) from None
    return load_config_text(text, source=file)
