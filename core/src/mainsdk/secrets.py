"""Secret references: a run gets a secret only when the call names it and the config lists it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection

import attrs

from mainsdk.errors import INVALID_OPTION, SECRET_NOT_ALLOWED, SandboxError

SecretResolver = Callable[[str], "str | None"]
# Matched whole (fullmatch): ``$`` also matches before a final newline, so "K\n" passed as a name.
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@attrs.frozen(repr=False)
class SecretRef:
    """A reference to a secret by name. Its value is looked up only when a run starts."""

    name: str
    prefix: str = ""  # text before the value, like "Bearer " for an Authorization header (not secret)

    def __repr__(self) -> str:
        return f"secret({self.name!r}, prefix={self.prefix!r})" if self.prefix else f"secret({self.name!r})"


MAX_PREFIX = 64


def secret(name: str, *, prefix: str = "") -> SecretRef:
    """Name a secret for a run's ``env`` or ``egress`` headers; it must be listed under ``sandbox.secrets``.

    ``prefix`` goes before the value (``secret("GITHUB_TOKEN", prefix="Bearer ")`` for an Authorization header).
    """
    if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
        raise SandboxError(
            INVALID_OPTION, f"secret({name!r}): a secret name is letters, digits and _, like OPENWEATHER_KEY"
        )
    if not isinstance(prefix, str) or len(prefix) > MAX_PREFIX or not all(" " <= c <= "~" for c in prefix):
        raise SandboxError(
            INVALID_OPTION,
            f"secret({name!r}, prefix=...): a prefix is at most {MAX_PREFIX} visible ASCII characters, like 'Bearer '",
        )
    return SecretRef(name, prefix)


def environment_secrets(name: str) -> str | None:
    """The default resolver: the app's own environment variable of that name."""
    return os.environ.get(name)


def resolve_secret(
    ref: SecretRef, where: str, listed: Collection[str], resolver: SecretResolver, hint: str = ""
) -> str:
    """The value of ``ref`` for ``where`` (``env.KEY``, an egress header): MAIN-SANDBOX-0009 unless it is listed
    under ``sandbox.secrets`` (``hint`` says more) and has a value, MAIN-SANDBOX-0001 for a resolver's wrong type.

    An empty value is no value: an unset CI secret expands to "", and a value that is nothing can be neither
    used nor redacted. The value is never shown, in these messages or elsewhere.
    """
    if ref.name not in listed:
        raise SandboxError(
            SECRET_NOT_ALLOWED,
            f"{where}: secret {ref.name!r} is not under sandbox.secrets; list it there in main.yaml{hint}",
        )
    value = resolver(ref.name)
    if value is not None and not isinstance(value, str):
        raise SandboxError(
            INVALID_OPTION,
            f"{where}: the secret resolver (deps.secret) returned {type(value).__name__} for {ref.name!r}; "
            "it must return the value as a string, or None",
        )
    if not value:
        raise SandboxError(
            SECRET_NOT_ALLOWED,
            f"{where}: secret {ref.name!r} is listed but has no value"
            f"{' (it is empty)' if value == '' else ''}; set it in the app's environment",
        )
    return value


SECRET_PREFIX = "secret:"


@attrs.frozen(repr=False, eq=False)
class Credential:
    """A driver's credential from its ``main.yaml`` section (``key: secret:E2B_API_KEY``), resolved by core.

    Mark a field of a driver's config class as a credential by typing it ``Credential``
    (default: ``Credential.named("E2B_API_KEY")``). The file gives ``secret:NAME`` (or,
    discouraged, the value itself); core resolves ``NAME`` through the app's resolver
    (``SandboxDeps.secret``) before it builds the driver, so every driver gets its
    credentials the same way. ``value`` is None until then, or when the secret has no
    value. Its ``repr`` and ``str`` never show the value, so it is safe in an error,
    a log line or an audit event.
    """

    name: str | None  # the secret's name; None when the file holds the value itself
    value: str | None = None
    setting: str = ""  # the dotted key it came from, for messages (sandbox.e2b.key)
    resolved: bool = False  # looked up (core does it before building the driver)

    @classmethod
    def named(cls, name: str) -> Credential:
        """A credential read from the secret ``name`` (unresolved)."""
        return cls(name)

    @classmethod
    def from_text(cls, text: str, setting: str = "") -> Credential:
        """``secret:NAME`` names a secret; any other text is the value itself."""
        if text.startswith(SECRET_PREFIX):
            name = text.removeprefix(SECRET_PREFIX)
            if not SECRET_NAME.fullmatch(name):
                raise ValueError(
                    f"secret:{name[:40]!r} is not a secret reference: a secret name is letters, digits and _, "
                    "like secret:E2B_API_KEY"
                )
            return cls(name, None, setting)
        return cls(None, text, setting)

    def resolve(self, resolver: SecretResolver, setting: str) -> Credential:
        """This credential with its value looked up through ``resolver`` (a literal value is kept)."""
        if self.name is None:
            return Credential(None, self.value, setting, resolved=True)
        return Credential(self.name, resolver(self.name) or None, setting, resolved=True)

    def missing(self) -> str:
        """What to tell the user when ``value`` is None: which key names which secret, and how to fix it."""
        where = self.setting or "the setting"
        if self.name is None:
            return f"{where} is empty"
        return f"{where} names the secret {self.name}, which has no value; set {self.name}"

    def __repr__(self) -> str:
        shown = f"secret:{self.name}" if self.name is not None else "<value given in the file>"
        return f"Credential({shown})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Credential):
            return NotImplemented
        return (self.name, self.value) == (other.name, other.value)

    def __hash__(self) -> int:
        return hash((self.name, self.value))
