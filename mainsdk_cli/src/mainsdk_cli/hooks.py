"""Subcommands other distributions add to the ``mainsdk`` command line, as llm's ``register_commands`` does.

A distribution names a plugin in the ``mainsdk.cli`` entry-point group; the plugin implements
``mainsdk_cli_commands`` and adds its commands to the registry it is given::

    from mainsdk.hookspecs import hookimpl
    from mainsdk_cli.hooks import CliCommands

    @hookimpl
    def mainsdk_cli_commands(commands: CliCommands) -> None:
        commands.add("check", help="find unsafe code and config", main=run)

``main`` gets the arguments after the command's words and returns the exit status. It parses them with a
parser of its own (``prog="mainsdk check"``), so its options, usage and errors are its own; it imports what
it needs when it is called, not when the plugin is loaded: the CLI loads every plugin of the group to list
their commands in ``mainsdk --help``, whichever command then runs. A command may also be a subcommand of
``sandbox`` (``"sandbox mcp"``).

The group is apart from ``mainsdk.plugins`` (audit sinks) so that a sandbox never imports these plugins:
only the command line does. The group's name is older than this distribution (mainsdk-cli), and kept:
installed plugins name it. The apps this project ships (``mainsdk check``, ``mainsdk sandbox mcp``) are
such plugins; when one is not installed, its command says which distribution to install.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib import metadata

import attrs
import pluggy

# The project's hookspec marker lives with the driver hooks' specs, in mainsdk.driver.
from mainsdk.driver import PROJECT, hookspec
from mainsdk.errors import INVALID_OPTION, SandboxError

CLI_GROUP = "mainsdk.cli"
# The words a plugin's command may sit under: the top level (``mainsdk check``) or ``mainsdk sandbox``.
GROUPS = ((), ("sandbox",))
# The commands of this project's own apps, where they come from: named when the distribution is missing.
KNOWN_COMMANDS = {
    ("check",): ("find unsafe code and config", "mainsdk-check", "./mainsdk_check"),
    ("sandbox", "mcp"): ("serve the code-runner action over MCP on stdio", "mainsdk-mcp", "./mainsdk_mcp"),
}
MISSING_EXIT = 2

CommandMain = Callable[[list[str]], int]


@hookspec
def mainsdk_cli_commands(commands: CliCommands) -> None:
    """Add subcommands to the ``mainsdk`` command line with ``commands.add(...)``; every plugin is called."""


@attrs.frozen
class CliCommand:
    """A subcommand a plugin added: its words (``("sandbox", "mcp")``), its help line and its entry point."""

    words: tuple[str, ...]
    help: str
    main: CommandMain


class CliCommands:
    """The registry ``mainsdk_cli_commands`` is given: the plugins' commands, by their words."""

    def __init__(self, reserved: Sequence[tuple[str, ...]] = ()) -> None:
        self._reserved = set(reserved)
        self.added: dict[tuple[str, ...], CliCommand] = {}

    def add(self, name: str, *, help: str, main: CommandMain) -> None:
        """Add ``mainsdk <name>``: ``name`` is one word, or ``"sandbox <word>"`` for a subcommand of sandbox.

        ``main`` is called with the arguments after the name and returns the exit status.
        """
        words = tuple(name.split())
        if not words or words[:-1] not in GROUPS or any(word.startswith("-") for word in words):
            raise SandboxError(
                INVALID_OPTION, f"it adds the command {name!r}; a command is one word, or 'sandbox <word>'"
            )
        if words in self._reserved or words in self.added or (words in GROUPS):
            raise SandboxError(
                INVALID_OPTION,
                f"'mainsdk {' '.join(words)}' is already a command (of mainsdk or another plugin); "
                "uninstall one of them",
            )
        self.added[words] = CliCommand(words, help, main)


def load_cli_commands(reserved: Sequence[tuple[str, ...]] = ()) -> dict[tuple[str, ...], CliCommand]:
    """The commands of the installed ``mainsdk.cli`` plugins, and a stand-in for each of this project's apps
    that is not installed (it says which distribution to install).

    ``reserved`` are the command line's own commands, which no plugin may replace. A plugin that fails to
    import is ``MAIN-SANDBOX-0001`` naming it.
    """
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(sys.modules[__name__])
    for entry in metadata.entry_points(group=CLI_GROUP):
        if pm.get_plugin(entry.name) is not None:
            continue
        try:
            plugin = entry.load()
        except Exception as exc:
            raise SandboxError(
                INVALID_OPTION, f"the command-line plugin {entry.name!r} ({entry.value}) failed to import: {exc}"
            ) from exc
        pm.register(plugin, name=entry.name)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise SandboxError(INVALID_OPTION, f"plugin {exc.plugin!r} has a hook that does not exist: {exc}") from exc
    commands = CliCommands(reserved)
    plugins = pm.list_name_plugin()
    for name, plugin in plugins:  # one plugin at a time, so that a failure names its plugin
        others = [other for _, other in plugins if other is not plugin]
        try:
            pm.subset_hook_caller("mainsdk_cli_commands", remove_plugins=others)(commands=commands)
        except SandboxError as exc:
            raise SandboxError(exc.code, f"the command-line plugin {name!r}: {exc.message}") from exc
        except Exception as exc:
            raise SandboxError(
                INVALID_OPTION, f"the command-line plugin {name!r} failed to add its commands: {exc!r}"
            ) from exc
    found = dict(commands.added)
    for words, (help_line, distribution, folder) in KNOWN_COMMANDS.items():
        if words not in found:
            found[words] = CliCommand(
                words, f"{help_line} (install {distribution})", _not_installed(words, distribution, folder)
            )
    return found


def _not_installed(words: tuple[str, ...], distribution: str, folder: str) -> CommandMain:
    def main(argv: list[str]) -> int:
        print(
            f"mainsdk: 'mainsdk {' '.join(words)}' is in the {distribution} distribution, which is not installed; "
            f"install it: pip install {distribution} (from a checkout of this repository: pip install {folder})",
            file=sys.stderr,
        )
        return MISSING_EXIT

    return main
