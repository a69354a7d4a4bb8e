"""What ``mainsdk check`` reports: a ``Finding``, and the rule behind each code."""

from __future__ import annotations

import attrs
from mainsdk.errors import INVALID_OPTION, LOCAL_IN_PRODUCTION, NETWORK_NOT_ALLOWED, UNKNOWN_CONFIG_KEY, UNSAFE_EVAL

__all__ = ["RULES", "Finding", "Rule", "rule_for"]

CHECK_CODES_URL = "https://mainsdk.dev/docs/reference/check-codes"


@attrs.frozen
class Finding:
    """One problem at one place.

    ``path`` is the file as reported (POSIX separators, relative to the
    repository root when the file is inside it); ``line`` and ``column`` are
    1-based, ``column`` counting characters. ``silenced`` is true when a
    ``# mainsdk: allow <code>`` comment on the line accepts it: it is still
    reported and counted, but does not fail the check.
    """

    code: str
    path: str
    line: int
    column: int
    message: str
    fix: str
    silenced: bool = False

    def sort_key(self) -> tuple[str, int, int, str]:
        """File order: path, then line, column and code."""
        return (self.path, self.line, self.column, self.code)


@attrs.frozen
class Rule:
    """A code's name and meaning, for SARIF ``rules`` and the docs link."""

    code: str
    name: str
    summary: str
    help: str

    @property
    def help_uri(self) -> str:
        """The code's entry on the check-codes page."""
        return f"{CHECK_CODES_URL}#{self.code.lower()}"


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule(
            UNSAFE_EVAL,
            "unsafe-eval",
            "eval, exec, compile or a look-alike runs a value that is not a string literal",
            "Code built at run time runs inside the app's process with all its secrets and network. "
            "Run it with sandbox.run instead, or pass a string literal.",
        ),
        Rule(
            LOCAL_IN_PRODUCTION,
            "local-driver-in-production",
            "The local sandbox driver in production",
            "The local driver is for development and is refused in production. "
            "Set sandbox.driver to vercel-sandbox or e2b for the production environment.",
        ),
        Rule(
            NETWORK_NOT_ALLOWED,
            "sandbox-host-not-allowed",
            "sandbox.network lists a host that network.allow does not cover",
            "Every host a sandbox run may reach must also be allowed to the app. "
            "Add the host to network.allow, or remove it from sandbox.network.",
        ),
        Rule(
            UNKNOWN_CONFIG_KEY,
            "unknown-config-key",
            "main.yaml has a key the loader does not know",
            "Remove the key or correct its spelling; the message lists the keys allowed there.",
        ),
        Rule(
            INVALID_OPTION,
            "invalid-sandbox-option",
            "A value in main.yaml is invalid",
            "Correct the value as the message says; the sandbox refuses to start with it.",
        ),
    )
}


def rule_for(code: str) -> Rule:
    """The rule for a code; a code this module does not describe (a newer loader's) gets a plain one."""
    return RULES.get(code) or Rule(code, code.lower(), f"{code} (see the check-codes page)", "See the message.")
