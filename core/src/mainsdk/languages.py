"""One vocabulary for languages: runs, cells, actions, the CLI and the MCP server take the same names and aliases.

Each language has one name and its aliases (``ALIASES``): ``python`` (``py``, ``python3``), ``javascript`` (``node``,
``js``), ``typescript`` (``ts``), ``bash`` (``sh``). A run names its language by the program that runs it (JavaScript
runs on ``node``: ``RunResult.language == "node"``); a cell by its executor (``javascript``). Either name, or any
alias, is accepted in both places; a language the place has not (a TypeScript run) is MAIN-SANDBOX-0001 saying where
it runs instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from mainsdk import errors
from mainsdk.errors import SandboxError

# Each language's name, and the other names it is called by (E2B's ``js`` and ``ts`` among them).
ALIASES: Mapping[str, tuple[str, ...]] = {
    "python": ("py", "python3"),
    "javascript": ("node", "js"),
    "typescript": ("ts",),
    "bash": ("sh",),
}
_NAMES = {alias: name for name, aliases in ALIASES.items() for alias in (name, *aliases)}
# How a run names each language it takes (mainsdk.driver.LANGUAGES): by its program.
_RUN_NAMES = {"python": "python", "javascript": "node", "bash": "bash"}


def vocabulary() -> str:
    """The names and aliases, as an error message lists them: ``python (py, python3), javascript (node, js), ...``."""
    return ", ".join(f"{name} ({', '.join(aliases)})" for name, aliases in ALIASES.items())


def _name(value: object, option: str, kind: str = "language") -> str:
    if isinstance(value, str):
        found = _NAMES.get(value.strip().lower())
        if found is not None:
            return found
    shown = repr(value) if isinstance(value, str) else f"a value of type {type(value).__name__}"
    raise SandboxError(errors.INVALID_OPTION, f"{option}: {shown} is not a {kind}; use one of {vocabulary()}")


def run_language(value: object, option: str = "language") -> str:
    """A run's language (``python``, ``node``, ``bash``) for any name or alias; MAIN-SANDBOX-0001 otherwise."""
    name = _name(value, option)
    if name not in _RUN_NAMES:
        raise SandboxError(
            errors.INVALID_OPTION,
            f"{option}: {name} code runs as a cell, not as a run: session.run_code(code, language={name!r}) in a "
            "session whose driver lists it in Capabilities.cells_languages; a run takes python, node (javascript, "
            "js) or bash",
        )
    return _RUN_NAMES[name]


def cell_language(value: object, option: str = "language") -> str:
    """A cell's language (``python``, ``javascript``, ``typescript``, ``bash``) for any name or alias."""
    return _name(value, option, "cell language")


def run_names() -> list[str]:
    """Every name and alias a run takes, each language's name first: what a command line offers as choices."""
    return [alias for name in _RUN_NAMES for alias in (name, *ALIASES[name])]
