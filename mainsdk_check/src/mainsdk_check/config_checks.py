"""The ``main.yaml`` checks: every loader error, MAIN-SANDBOX-0011 and MAIN-SANDBOX-0012, each with its line.

The loader (``mainsdk.config.load_config``) says what is wrong; the
round-trip YAML tree says where, for the two checks the loader does not make.

Environment overlays: for ``--env ENV`` a file ``main.ENV.yaml`` next to
``main.yaml`` (for another config name, ``<stem>.ENV<suffix>``) may set
``sandbox.driver`` for that environment; it overrides the base file's. For
production, ``main.prod.yaml`` and ``main.production.yaml`` are both read.
Only ``sandbox.driver`` is taken from an overlay; its other keys are checked
by the loader but not merged.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
from mainsdk.config import (
    DEFAULT_CONFIG_FILE,
    AppConfig,
    SandboxConfig,
    config_from_yaml,
    install_hint,
    item_position,
    key_position,
    read_config_file,
    read_yaml,
    undeclared_sections,
    validate_sandbox_host,
)
from mainsdk.errors import (
    INVALID_OPTION,
    LOCAL_IN_PRODUCTION,
    NETWORK_NOT_ALLOWED,
    UNKNOWN_CONFIG_KEY,
    ConfigError,
    ConfigProblem,
)
from mainsdk.hosts import host_covered
from mainsdk.preflight import PRODUCTION_ENVS, is_production
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from mainsdk_check.findings import Finding, rule_for

__all__ = [
    "PRODUCTION_ENVS",
    "CannotCheck",
    "ConfigCheck",
    "check_config",
    "check_config_files",
    "is_config_file",
    "is_production",
    "overlay_files",
]

LOCAL_DRIVER = "local"
CONFIG_FILE_NAME = re.compile(r"main[^/]*\.ya?ml")
"""The names of config files and their overlays: ``main.yaml``, ``main.prod.yaml``, ``main.yml``."""

Display = Callable[[Path], str]


class CannotCheck(Exception):
    """The check could not run at all (a missing path, an unreadable config): exit status 2."""


def is_config_file(path: Path) -> bool:
    """Whether ``path`` is named like a ``main.yaml`` or an overlay of one (what the pre-commit hook passes)."""
    return CONFIG_FILE_NAME.fullmatch(path.name) is not None and path.is_file()


def overlay_files(config_file: Path, env: str) -> list[Path]:
    """The overlay files for ``env`` next to ``config_file`` that exist, in the order they are read."""
    name = env.strip().lower()
    names = PRODUCTION_ENVS if name in PRODUCTION_ENVS else (name,)
    candidates = [config_file.with_name(f"{config_file.stem}.{n}{config_file.suffix}") for n in names]
    return [path for path in candidates if path.is_file()]


@attrs.frozen
class _Document:
    """One config file: where it is, its round-trip tree (None if it is not YAML) and the loader's verdict."""

    path: Path
    tree: Any
    config: AppConfig | None
    problems: tuple[ConfigProblem, ...]


def _read(path: Path) -> _Document:
    try:
        text = read_config_file(path)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise CannotCheck(f"cannot read {path}: {reason}") from None
    except ConfigError as exc:  # too large to be a main.yaml
        return _Document(path, None, None, exc.problems)
    # The loader's own reader and bounds: a file it refuses (too deep, an alias bomb) is never built here either.
    try:
        tree = read_yaml(text, source=path)
    except ConfigError as exc:
        return _Document(path, None, None, exc.problems)
    config: AppConfig | None = None
    problems: tuple[ConfigProblem, ...] = ()
    try:
        # Every installed driver's section, not only the configured one's: an overlay may switch drivers.
        config = config_from_yaml(tree, source=path, every_section=True)
    except ConfigError as exc:
        problems = exc.problems
    return _Document(path, tree, config, problems)


def _mapping(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, CommentedMap) else None


def _key_position(node: CommentedMap, key: str) -> tuple[int, int]:
    line, column = key_position(node, key)  # also a key a <<: merge brought in
    return line + 1, column + 1


_PROBLEM_FIXES = {
    UNKNOWN_CONFIG_KEY: "remove the key or correct its spelling",
    INVALID_OPTION: "correct the value as the message says",
}


def _problem_findings(document: _Document, display: Display) -> list[Finding]:
    findings = []
    for problem in document.problems:
        # The loader names the whole file "main.yaml" when the problem is not under a key.
        where = "" if problem.key in ("", DEFAULT_CONFIG_FILE) else f"{problem.key}: "
        findings.append(
            Finding(
                code=problem.code,
                path=display(document.path),
                line=problem.line or 1,
                column=problem.column or 1,
                message=f"{where}{problem.message}",
                fix=_PROBLEM_FIXES.get(problem.code) or f"see {rule_for(problem.code).help_uri}",
            )
        )
    return findings


def _network_findings(document: _Document, display: Display) -> list[Finding]:
    """MAIN-SANDBOX-0012: each ``sandbox.network`` host that ``network.allow`` does not cover."""
    hosts = _mapping(_mapping(document.tree, "sandbox"), "network")
    if not isinstance(hosts, CommentedSeq):
        return []
    if document.config is not None:
        allow: Sequence[str] = document.config.network_allow
    else:
        # The loader refused the file for another reason: read network.allow ourselves.
        raw = _mapping(_mapping(document.tree, "network"), "allow")
        allow = [item for item in raw if isinstance(item, str)] if isinstance(raw, CommentedSeq) else []
    findings = []
    for index, host in enumerate(hosts):
        if not isinstance(host, str):
            continue
        try:
            validate_sandbox_host(host)
        except ValueError:
            continue  # the loader reports it as an invalid option; it is not also a missing host
        if host_covered(host, allow):
            continue
        line, column = item_position(hosts, index)
        allowed = ", ".join(allow) if allow else "nothing"
        findings.append(
            Finding(
                code=NETWORK_NOT_ALLOWED,
                path=display(document.path),
                line=line + 1,
                column=column + 1,
                message=f'sandbox.network lists "{host}", which network.allow ({allowed}) does not cover',
                fix=f'add "{host}" to network.allow, or remove it from sandbox.network',
            )
        )
    return findings


def _driver(document: _Document) -> tuple[str, tuple[int, int]] | None:
    """The ``sandbox.driver`` a file sets, and the position of its key; None when it sets none."""
    sandbox = _mapping(document.tree, "sandbox")
    if not isinstance(sandbox, CommentedMap) or "driver" not in sandbox:
        return None
    return str(sandbox["driver"]).strip(), _key_position(sandbox, "driver")


def _local_finding(document: _Document, position: tuple[int, int], env: str, display: Display, how: str) -> Finding:
    line, column = position
    return Finding(
        code=LOCAL_IN_PRODUCTION,
        path=display(document.path),
        line=line,
        column=column,
        message=f"{how}, and the local driver is refused in production (--env {env})",
        fix=(
            "set sandbox.driver to vercel-sandbox or e2b, in main.yaml or in a "
            "main.prod.yaml overlay that applies in production"
        ),
    )


def _production_findings(base: _Document, overlays: Sequence[_Document], env: str, display: Display) -> list[Finding]:
    """MAIN-SANDBOX-0011: the driver that production would get is ``local``."""
    findings: list[Finding] = []
    overlay_drivers = [(document, setting) for document in overlays if (setting := _driver(document)) is not None]
    for document, (driver, position) in overlay_drivers:
        if driver == LOCAL_DRIVER:
            name = document.path.name
            findings.append(_local_finding(document, position, env, display, f"{name} sets sandbox.driver: local"))
    if overlay_drivers:
        return findings  # the overlays decide the production driver
    base_setting = _driver(base)
    if base_setting is not None:
        base_driver, base_position = base_setting
        if base_driver == LOCAL_DRIVER:
            findings.append(_local_finding(base, base_position, env, display, "sandbox.driver is local"))
        return findings
    # No file names a driver. A file without a sandbox section does not use the sandbox, so only
    # a sandbox section that leaves the driver at its default is reported.
    if SandboxConfig().driver != LOCAL_DRIVER:
        return findings
    for document in (base, *overlays):
        if isinstance(document.tree, CommentedMap) and "sandbox" in document.tree:
            how = "sandbox.driver is not set, so it is local by default"
            findings.append(_local_finding(document, _key_position(document.tree, "sandbox"), env, display, how))
            break
    return findings


@attrs.frozen
class ConfigCheck:
    """The findings in a ``main.yaml`` and its overlays, and which of those files the loader refuses."""

    findings: tuple[Finding, ...]
    unloadable: tuple[str, ...]  # one line per refused file, for the check's errors
    notes: tuple[str, ...] = ()  # what could not be checked here, and why (not a finding)


def check_config_files(config_file: Path, env: str | None, display: Display) -> ConfigCheck:
    """``check_config``, also saying which files the app could not load.

    A file the loader refuses is listed in ``unloadable``: the app would not
    start with it, so the check's exit status is 2 (could not run), not 1.
    """
    base = _read(config_file)
    overlays = [_read(path) for path in overlay_files(config_file, env)] if env else []
    findings = _problem_findings(base, display) + _network_findings(base, display)
    for overlay in overlays:
        findings += _problem_findings(overlay, display)
    if env is not None and is_production(env):
        findings += _production_findings(base, overlays, env, display)
    unloadable = []
    for document in (base, *overlays):
        if document.problems:
            count = len(document.problems)
            unloadable.append(
                f"{display(document.path)} cannot be loaded: the app would refuse it at start "
                f"({count} problem{'' if count == 1 else 's'} listed above)"
            )
    return ConfigCheck(tuple(findings), tuple(unloadable), tuple(_section_notes((base, *overlays), display)))


def _section_notes(documents: Sequence[_Document], display: Display) -> list[str]:
    """A note per driver section no installed driver declares: the check cannot say whether it is right."""
    notes = []
    for document in documents:
        if document.config is None or not isinstance(sandbox := _mapping(document.tree, "sandbox"), CommentedMap):
            continue
        for name in undeclared_sections(document.config):
            line, _column = _key_position(sandbox, name)
            notes.append(
                f"{display(document.path)}:{line}: sandbox.{name} is not checked: no installed driver declares "
                f"that section; install the driver that uses it to check it{install_hint(name)}"
            )
    return notes


def check_config(config_file: Path, env: str | None, display: Display) -> list[Finding]:
    """Check one ``main.yaml`` (and its overlays for ``env``).

    Reports every problem ``load_config`` finds (MAIN-CONFIG-0003,
    MAIN-SANDBOX-0001 and any other), MAIN-SANDBOX-0012 for each host in
    ``sandbox.network`` not covered by ``network.allow``, and with a
    production ``env`` MAIN-SANDBOX-0011 when the driver would be ``local``.
    ``display`` turns a file path into the path put in findings. Raises
    ``CannotCheck`` when a file cannot be read.
    """
    return list(check_config_files(config_file, env, display).findings)
