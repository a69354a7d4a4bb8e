"""The shape of every public argument, checked once at the boundary, before any policy or driver sees it.

Each function takes what the caller passed and either returns it in the one
form the rest of core uses, or raises ``MAIN-SANDBOX-0001`` naming the argument,
what it got and what works. Policy (limits against ``main.yaml``, hosts
against the allowlists, secrets against ``sandbox.secrets``) is ``preflight``'s
business; this module only makes sure no value of the wrong type, encoding or
size reaches it, so nothing a caller can pass ends in a raw ``TypeError`` or
in an outage (``MAIN-SANDBOX-0006``) that a retry would repeat forever.

File contents are ``str`` (written as UTF-8) or ``bytes``. A ``pathlib.Path``
is refused rather than read: a path in a run's files is far more often a
mistake than a wish to upload the host file, and reading host files on the
caller's behalf is not this library's to decide (pass ``path.read_bytes()``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import os
import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any, TypeVar, cast

from mainsdk import errors
from mainsdk.errors import SandboxError
from mainsdk.languages import run_language
from mainsdk.secrets import SecretRef
from mainsdk.units import describe

# Matched whole (fullmatch): ``$`` also matches before a final newline, so "A\n" passed as a name.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Linux refuses one argv or environment string of 128 KiB or more (MAX_ARG_STRLEN) with E2BIG, and all of
# them together past ARG_MAX; refuse before that, as a mistake, not after as an outage.
MAX_ARG_BYTES = 128 * 1024 - 1
MAX_ARGV_ENV_BYTES = 1024 * 1024
ARG_POINTER_BYTES = 8  # execve charges a pointer per string too
MAX_NAME_SEGMENT_BYTES = 255  # NAME_MAX
MAX_PATH_BYTES = 4095  # PATH_MAX less its NUL
MAX_LABEL_CHARS = 256  # a feature or action name, kept in audit events
LIMIT_KEYS = ("timeout", "memory", "output", "files", "max-cost", "max_cost")


def invalid(argument: str, message: str) -> SandboxError:
    """``MAIN-SANDBOX-0001`` for ``argument``: ``"<argument>: <message>"``."""
    return SandboxError(errors.INVALID_OPTION, f"{argument}: {message}")


def type_name(value: object) -> str:
    """The type of a value as a message says it: ``int``, ``NoneType``, ``PosixPath``."""
    return type(value).__name__


def _utf8(value: str, argument: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid(
            argument,
            f"holds {value[exc.start : exc.end]!r} at position {exc.start}, which is not valid Unicode text "
            "(a lone surrogate); pass valid text, or bytes where bytes are allowed",
        ) from None


def text(value: object, argument: str, *, empty: bool = False, nul: bool = False, max_bytes: int | None = None) -> str:
    """A ``str`` that encodes as UTF-8; by default non-empty and without NUL."""
    if not isinstance(value, str):
        raise invalid(argument, f"must be a string, not {type_name(value)}")
    encoded = _utf8(value, argument)
    if not empty and not value:
        raise invalid(argument, "is empty")
    if not nul and "\0" in value:
        raise invalid(argument, "holds a NUL byte, which no program can receive; remove it")
    if max_bytes is not None and len(encoded) > max_bytes:
        raise invalid(argument, f"is {len(encoded)} bytes, above the {max_bytes} a program can receive")
    return value


def optional_text(value: object, argument: str, *, max_chars: int = MAX_LABEL_CHARS) -> str | None:
    """None, or a short one-line label (a feature, an agent)."""
    if value is None:
        return None
    checked = text(value, argument)
    if len(checked) > max_chars or any(c in checked for c in "\r\n"):
        raise invalid(argument, f"must be one line of at most {max_chars} characters")
    return checked


def code(value: object) -> str:
    """The code of a run: non-empty text, without NUL (no interpreter accepts it in source)."""
    if not isinstance(value, str):
        raise invalid("code", f"must be a string of source, not {type_name(value)}")
    checked = text(value, "code", empty=True)
    if not checked.strip():
        raise invalid("code", "is empty; pass the source to run as code=...")
    return checked


def language(value: object) -> str:
    """A run's language (``python``, ``node``, ``bash``), from any of its names or aliases (``mainsdk.languages``)."""
    return run_language(value)


def mapping(value: object, argument: str, example: str) -> Mapping[Any, Any]:
    """A mapping (None is empty); a list or a string is the usual mistake and is named."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise invalid(argument, f"must be a mapping like {example}, not {type_name(value)}")
    return value


def relative_path(name: object, argument: str) -> str:
    """A path inside the work folder: relative, no '..', '.', empty segment, NUL or backslash, and not too long."""
    if not isinstance(name, str) or not name:
        raise invalid(argument, f"a file name must be a non-empty string, not {name!r}")
    encoded = _utf8(name, argument)
    if "\0" in name:
        raise invalid(argument, f"{name!r} has a NUL byte")
    if name.startswith("/") or "\\" in name:
        raise invalid(
            argument, f"{name!r} is absolute or uses '\\'; use a path relative to the work folder, like data.csv"
        )
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise invalid(argument, f"{name!r} leaves the work folder or has an empty segment; use a plain relative path")
    if len(encoded) > MAX_PATH_BYTES or any(len(p.encode()) > MAX_NAME_SEGMENT_BYTES for p in parts):
        raise invalid(
            argument,
            f"{name[:40]!r}... is too long: at most {MAX_NAME_SEGMENT_BYTES} bytes a name, {MAX_PATH_BYTES} in all",
        )
    return posixpath.normpath(name)


def file_data(value: object, argument: str) -> bytes:
    """File contents: ``str`` (written as UTF-8) or ``bytes``/``bytearray``; anything else is refused."""
    if isinstance(value, str):
        return _utf8(value, argument)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, os.PathLike):
        raise invalid(
            argument,
            f"is a path ({type_name(value)}), which is not read for you; pass its contents, like path.read_bytes()",
        )
    raise invalid(argument, f"must be str or bytes, not {type_name(value)}")


def files(value: object, argument: str = "files") -> dict[str, bytes]:
    """A run's or session's files: relative path to contents, no path both a file and a folder."""
    checked: dict[str, bytes] = {}
    for name, content in mapping(value, argument, "{'data.csv': 'a,b'}").items():
        path = relative_path(name, argument)
        if path in checked:
            raise invalid(argument, f"{name!r} is given twice")
        checked[path] = file_data(content, f"{argument}[{name!r}]")
    for path in checked:
        parent = posixpath.dirname(path)
        while parent:
            if parent in checked:
                raise invalid(
                    argument,
                    f"{parent!r} is a file and also the folder of {path!r}; a path cannot be both, rename one",
                )
            parent = posixpath.dirname(parent)
    return checked


def hosts(value: object, argument: str = "network") -> tuple[str, ...]:
    """A list of host names (the checks then hold each against the allowlists)."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, set, frozenset)):
        raise invalid(argument, f"must be a list of hosts, like ['pypi.org'], not {type_name(value)}")
    for host in value:
        text(host, f"{argument} host", max_bytes=253)
    return tuple(value)


def env(value: object) -> dict[str, str | SecretRef]:
    """Variable name to a string or ``secret('NAME')``; names are letters, digits and _, values text without NUL."""
    checked: dict[str, str | SecretRef] = {}
    for name, item in mapping(value, "env", "{'MODE': 'fast'}").items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name) or len(name) > 255:
            raise invalid("env", f"{name!r} is not a variable name; use letters, digits and _, like MODE")
        if isinstance(item, SecretRef):
            checked[name] = item
        elif isinstance(item, str):
            checked[name] = text(item, f"env.{name}", empty=True, max_bytes=MAX_ARG_BYTES - len(name) - 1)
        else:
            raise invalid(f"env.{name}", f"must be a string or secret('NAME'), not {type_name(item)}")
    return checked


def limits(value: object) -> dict[str, Any]:
    """The limits a call lowers: known keys, each a number (not a yes/no) or a string with a unit."""
    checked: dict[str, Any] = {}
    for key, item in mapping(value, "limits", "{'timeout': '5s'}").items():
        if not isinstance(key, str) or key not in LIMIT_KEYS:
            raise invalid(f"limits.{key}", "is not a limit; the limits are timeout, memory, output, files and max-cost")
        checked[key] = limit_value(item, f"limits.{key}")
    return checked


def limit_value(value: object, argument: str) -> Any:
    """One limit value: a string, or a finite number that is not a bool (``True`` is not one second)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        raise invalid(
            argument, f"{describe(value)} is not a limit value; use a string with a unit, like '5s' or '64MB'"
        )
    if isinstance(value, str):
        if len(value) > 64:
            raise invalid(argument, f"{value[:20]!r}... is too long for a limit; use a number with a unit, like '5s'")
        return text(value, argument)
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid(argument, f"{value} is not a finite number")
    if isinstance(value, Decimal) and not value.is_finite():
        raise invalid(argument, f"{value} is not a finite number")
    if isinstance(value, int) and value.bit_length() > 64:
        raise invalid(argument, f"a number of {value.bit_length()} bits is far too large")
    return value


def listener(value: object, argument: str = "on_output") -> Callable[[str, bytes], None] | None:
    """None, or a callable taking (stream, chunk)."""
    return cast("Callable[[str, bytes], None] | None", callback(value, argument, ("stdout", b""), "(stream, data)"))


def callback(
    value: object, argument: str, sample: tuple[object, ...], takes: str, *, awaitable: bool = False, refused: str = ""
) -> Callable[..., object] | None:
    """None, or a callable that can be called with ``sample`` (described as ``takes`` in the message).

    ``awaitable``: an ``async def`` is allowed (the caller awaits what it returns); otherwise it is refused, since
    its coroutine would never run and what it was given would be lost. ``refused`` says why, and what to do.
    """
    if value is None:
        return None
    if not callable(value):
        raise invalid(argument, f"must be a function taking {takes}, not {type_name(value)}")
    name = getattr(value, "__name__", type_name(value))
    if not awaitable and is_async_function(value):
        why = refused or "nothing here awaits it, so it would never run; pass a plain function"
        raise invalid(argument, f"{name} is an async function: {why}")
    try:
        inspect.signature(value).bind(*sample)
    except TypeError:
        raise invalid(argument, f"{name} cannot take {takes}") from None
    except ValueError:
        pass  # a builtin without a signature: it will be called and answer for itself
    return value


def is_async_function(value: object) -> bool:
    """Whether calling ``value`` makes a coroutine: an ``async def`` (or a partial of one), or an object whose
    ``__call__`` is one."""
    call = type(value).__dict__.get("__call__") if not inspect.isroutine(value) else None
    return inspect.iscoroutinefunction(value) or inspect.iscoroutinefunction(call)


def program(value: object) -> str:
    """A session command's program: a name like ``python3``; a shell line (``"python3 -c 'print(1)'"``) is refused
    with the program and argument list it means, since ``run`` never goes through a shell."""
    checked = text(value, "program", max_bytes=MAX_PATH_BYTES)
    if checked != checked.strip() or any(c.isspace() for c in checked):
        import shlex  # only on this mistake

        try:
            words = shlex.split(checked)
        except ValueError:
            words = checked.split()
        shown = f"run({words[0]!r}, {words[1:]!r})" if words else "run('python3', ['-c', 'print(1)'])"
        raise invalid(
            "program",
            f"{checked!r} is a shell line, not a program: run takes the program and a list of its arguments, "
            f"never a shell, so write {shown}",
        )
    return checked


def program_args(value: object) -> tuple[str, ...]:
    """A session command's arguments: a list of strings, one argument each, within what Linux passes."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise invalid("args", f"must be a list of strings, like ['-c', 'print(1)'], not {type_name(value)}")
    checked = tuple(text(arg, f"args[{i}]", empty=True, max_bytes=MAX_ARG_BYTES) for i, arg in enumerate(value))
    if argv_env_bytes(checked, {}) > MAX_ARGV_ENV_BYTES:
        raise invalid("args", f"hold more than {MAX_ARGV_ENV_BYTES} bytes in all; pass large data as a file")
    return checked


def argv_env_bytes(args: Sequence[str], env: Mapping[str, str]) -> int:
    """What ``args`` and ``env`` cost against Linux's ARG_MAX: each string, its NUL and its pointer.

    The pointers count: 300,000 one-letter arguments are 600 KB of text but 3 MB to execve (E2BIG), and
    they passed this check only to fail in the driver as an outage (``MAIN-SANDBOX-0006``).
    """
    strings = sum(len(arg.encode()) + 1 for arg in args) + sum(len(k) + len(v.encode()) + 2 for k, v in env.items())
    return strings + ARG_POINTER_BYTES * (len(args) + len(env))


def command_args_with_env(args: Sequence[str], env: Mapping[str, str]) -> None:
    """Refuse a command whose arguments and environment together pass ``MAX_ARGV_ENV_BYTES``: execve takes both."""
    if argv_env_bytes(args, env) > MAX_ARGV_ENV_BYTES:
        raise invalid(
            "args",
            f"with the session's env, hold more than {MAX_ARGV_ENV_BYTES} bytes in all; pass large data as a file",
        )


def boolean(value: object, argument: str) -> bool:
    """A real ``True``/``False`` (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise invalid(argument, f"must be True or False, not {type_name(value)}")
    return value


def count(value: object, argument: str, *, minimum: int, maximum: int) -> int:
    """A whole number in [minimum, maximum] that is not a bool."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(argument, f"must be a whole number, not {type_name(value)}")
    if not minimum <= value <= maximum:
        raise invalid(argument, f"{value} is out of range; use {minimum} to {maximum}")
    return value


_C = TypeVar("_C", bound=type)


def _call_mistake(name: str, parameters: Sequence[str], kwargs: Mapping[str, object], exc: TypeError) -> SandboxError:
    """MAIN-SANDBOX-0001 for a call Python would refuse with a ``TypeError``: which keyword, and the valid ones."""
    takes = f"it takes {', '.join(parameters)}" if parameters else "it takes no arguments"
    unknown = [key for key in kwargs if key not in parameters]
    if unknown:
        close = difflib.get_close_matches(unknown[0], parameters, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return invalid(f"{name}()", f"{unknown[0]!r} is not an option{hint} ({takes})")
    return invalid(f"{name}()", f"{exc} ({takes})")


def checked_calls(name: str) -> Callable[[_C], _C]:
    """A class decorator: each public method refuses a call it cannot take with MAIN-SANDBOX-0001, not ``TypeError``.

    An unknown keyword (``run(..., timout="5s")``) or a wrong count of arguments is a caller's mistake like any
    other wrong argument: the message names ``<name>.<method>()``, the keyword at fault and the valid ones.
    Coroutine methods refuse when awaited, as every other refusal of theirs does. A method taking ``**options``
    passes them on to its async twin, which checks them.
    """

    def decorate(cls: _C) -> _C:
        for attribute, function in list(vars(cls).items()):
            public = not attribute.startswith("_") or attribute == "__init__"
            if public and inspect.isfunction(function):
                label = cls.__name__ if attribute == "__init__" else f"{name}.{attribute}"
                setattr(cls, attribute, _checked(function, label))
        return cls

    return decorate


_F = TypeVar("_F", bound=Callable[..., Any])


def checked_function(name: str) -> Callable[[_F], _F]:
    """``checked_calls`` for a public function (``create_sandbox``, ``load_config``): ``<name>()`` in messages."""

    def decorate(function: _F) -> _F:
        return cast("_F", _checked(function, name, method=False))

    return decorate


def _checked(function: Callable[..., Any], name: str, *, method: bool = True) -> Callable[..., Any]:
    signature = inspect.signature(function)
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    own = list(signature.parameters.values())[1 if method else 0 :]  # a method's self is not the caller's
    parameters = [p.name for p in own if p.kind not in kinds]

    shapes: set[tuple[int, frozenset[str]]] = set()  # (count, keywords) that bound: binding depends on no more

    def check(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (shape := (len(args), frozenset(kwargs))) not in shapes:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise _call_mistake(name, parameters, kwargs, exc) from None
            if len(shapes) < 64:
                shapes.add(shape)

    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def checked_coroutine(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            return await function(*args, **kwargs)

        return checked_coroutine

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return function(*args, **kwargs)

    return checked
