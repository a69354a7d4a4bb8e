"""The pluggy hooks of mainsdk sandbox, and ``hookimpl``, the marker every plugin's implementations carry.

The driver hooks are specified once, as the methods of the protocols in ``mainsdk.driver``: ``Driver``
(required), ``SessionDriver`` (with the two file hooks) and ``OptionalDriverHooks``. Their docstrings say
what each hook must do, their types are what mypy checks a driver against, and pluggy calls them as its
specs (``add_hookspecs``). The hooks that are not a driver's are specified here: ``mainsdk_audit_event``,
which every audit sink implements and every sink gets.

Hooks are called with keyword arguments only, and an implementation may take fewer arguments than its
spec: a spec can grow without breaking plugins. A driver hook declared ``async def`` returns an awaitable
core awaits, so one implementation serves the sync and the async API; one declared ``def`` returns its
value at once (``SYNC_DRIVER_HOOKS``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from mainsdk.driver import PROJECT, Driver, OptionalDriverHooks, SessionDriver, hookspec

if TYPE_CHECKING:
    from mainsdk.audit import AuditEvent
    from mainsdk.config import AppConfig

hookimpl = pluggy.HookimplMarker(PROJECT)  # what every plugin marks its hook implementations with


@hookspec
def mainsdk_audit_event(event: AuditEvent, config: AppConfig) -> None:
    """Record one audit event. Called once per run, per session command or cell, and per refused call.

    ``config`` is the app config, for sinks that read their settings from it (read them once per
    config, not on every event). The event never holds code, output or secret values. The hook is
    called as pluggy calls any hook, so a ``wrapper=True`` sink runs around the others. A sink must
    not raise; if a plain one does, core logs the failure and the other sinks and the run go on.
    """


# Where the specs are: the driver protocols' methods (SessionDriver inherits Driver's), then this module's.
_SPEC_HOLDERS: tuple[type | ModuleType, ...] = (SessionDriver, OptionalDriverHooks, sys.modules[__name__])


def _marked(holder: type | ModuleType) -> dict[str, Callable[..., Any]]:
    """The hook specs ``holder`` defines, in the order it defines them (a class's bases first)."""
    spaces = [vars(c) for c in reversed(holder.__mro__)] if isinstance(holder, type) else [vars(holder)]
    return {name: value for space in spaces for name, value in space.items() if hasattr(value, f"{PROJECT}_spec")}


def hook_specs() -> dict[str, Callable[..., Any]]:
    """Every hook's spec function, by hook name."""
    return {name: spec for holder in _SPEC_HOLDERS for name, spec in _marked(holder).items()}


def add_hookspecs(pm: pluggy.PluginManager) -> None:
    """Register every hook's spec with ``pm``."""
    for holder in _SPEC_HOLDERS:
        pm.add_hookspecs(holder)


# The hooks every driver implements (``Driver``'s), and every hook a driver may implement.
REQUIRED_DRIVER_HOOKS = tuple(_marked(Driver))
DRIVER_HOOKS = tuple([*_marked(SessionDriver), *_marked(OptionalDriverHooks)])
# The driver hooks core calls without awaiting: declared ``def``, not ``async def``, in their protocol.
SYNC_DRIVER_HOOKS = tuple(hook for hook in DRIVER_HOOKS if not inspect.iscoroutinefunction(hook_specs()[hook]))
