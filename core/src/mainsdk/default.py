"""The ready-made ``sandbox`` and ``async_sandbox``, built from ``main.yaml`` on first use.

Nothing is read or imported until one of them is used, so ``import mainsdk``
stays cheap and works with no driver installed.
"""

from __future__ import annotations

import threading
from typing import Any

from mainsdk.config import load_config
from mainsdk.engine import AsyncSandbox, SandboxDeps
from mainsdk.sync import Sandbox

_lock = threading.Lock()
_shared: dict[str, AsyncSandbox] = {}


def shared_async_sandbox() -> AsyncSandbox:
    """The process-wide sandbox built from ``main.yaml`` (``MAINSDK_CONFIG``, else ``./main.yaml``, else defaults)."""
    with _lock:
        if "sandbox" not in _shared:
            _shared["sandbox"] = AsyncSandbox(SandboxDeps(config=load_config()))
        return _shared["sandbox"]


def reset_default_sandbox() -> None:
    """Release the built sandbox's driver and forget it: the next use reads ``main.yaml`` again."""
    with _lock:
        built = _shared.pop("sandbox", None)
    if built is not None:
        built.hooks.shutdown()


class _Lazy:
    """Stands in for a sandbox until first use."""

    def __init__(self, synchronous: bool) -> None:
        self._synchronous = synchronous

    def _target(self) -> Sandbox | AsyncSandbox:
        shared = shared_async_sandbox()
        return Sandbox(shared) if self._synchronous else shared

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __repr__(self) -> str:
        return f"<mainsdk {'sandbox' if self._synchronous else 'async_sandbox'} (built from main.yaml on first use)>"


sandbox: Sandbox = _Lazy(synchronous=True)  # type: ignore[assignment]
async_sandbox: AsyncSandbox = _Lazy(synchronous=False)  # type: ignore[assignment]
