"""Secret references: a run gets a secret only when the call names it and the config lists it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import attrs

from mainsdk.errors import INVALID_OPTION, SandboxError

SecretResolver = Callable[[str], "str | None"]
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@attrs.frozen(repr=False)
class SecretRef:
    """A reference to a secret by name. Its value is looked up only when a run starts."""

    name: str

    def __repr__(self) -> str:
        return f"secret({self.name!r})"


def secret(name: str) -> SecretRef:
    """Name a secret for a run's ``env``; it must be listed under ``sandbox.secrets``."""
    if not isinstance(name, str) or not SECRET_NAME.match(name):
        raise SandboxError(
            INVALID_OPTION, f"secret({name!r}): a secret name is letters, digits and _, like OPENWEATHER_KEY"
        )
    return SecretRef(name)


def environment_secrets(name: str) -> str | None:
    """The default resolver: the app's own environment variable of that name."""
    return os.environ.get(name)
