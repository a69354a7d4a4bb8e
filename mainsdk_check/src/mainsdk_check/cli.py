"""``mainsdk check``: added to the ``mainsdk`` command line through the ``mainsdk_cli_commands`` hook.

Every ``mainsdk`` command loads this module to list ``check``; the linter needs nothing but core and the
standard library (``ast``, ``tokenize``), a few milliseconds to import, so it is not deferred.
"""

from __future__ import annotations

from mainsdk.hookspecs import hookimpl
from mainsdk_cli.hooks import CliCommands

from mainsdk_check.command import main


@hookimpl
def mainsdk_cli_commands(commands: CliCommands) -> None:
    """Add ``mainsdk check``."""
    commands.add("check", help="find unsafe code and config", main=main)
