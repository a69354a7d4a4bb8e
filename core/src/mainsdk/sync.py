"""``Sandbox``: the synchronous twin of ``AsyncSandbox``, driving it on a private event loop thread.

One loop thread serves every synchronous sandbox in the process, so a driver's
long-lived clients stay on one loop. Interrupting a call (Ctrl-C) cancels the
run there and waits for the driver to clean up before re-raising.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, TypeVar

from mainsdk.driver import Capabilities
from mainsdk.engine import AsyncSandbox, SandboxDeps
from mainsdk.files import FileRef

T = TypeVar("T")
P = ParamSpec("P")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="mainsdk-sandbox", daemon=True).start()
                self._loop = loop
            return self._loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._get_loop())
        try:
            return future.result()
        except BaseException:
            if not future.done():
                future.cancel()  # reaches the task in the loop: the driver kills and cleans up
                # The original interruption is what we re-raise; the run's own end no longer matters.
                with contextlib.suppress(BaseException):
                    future.result(timeout=30)
            raise


_LOOP = _LoopThread()


def _blocking(
    method: Callable[Concatenate[AsyncSandbox, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Sandbox, P], T]:
    """The synchronous twin of an ``AsyncSandbox`` method: same arguments, same docstring, result returned."""

    @functools.wraps(method)
    def blocking(self: Sandbox, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return _LOOP.call(method(self._async, *args, **kwargs))

    return blocking


class Sandbox:
    """The sandbox interface for synchronous code. Same calls as ``AsyncSandbox``, returning results directly."""

    def __init__(self, deps: SandboxDeps | Mapping[str, Any] | AsyncSandbox | None = None) -> None:
        self._async = deps if isinstance(deps, AsyncSandbox) else AsyncSandbox(deps)
        self.files = Files(self._async)

    @property
    def config(self) -> Any:
        """The parsed config."""
        return self._async.config

    @property
    def driver_id(self) -> str:
        """The driver id, as ``main.yaml`` names it."""
        return self._async.driver_id

    def capabilities(self) -> Capabilities:
        """What this sandbox's driver can do."""
        return self._async.capabilities()

    run = _blocking(AsyncSandbox.run)

    def close(self) -> None:
        """Release what the driver holds for this process."""
        _LOOP.call(self._async.aclose())


class Files:
    """The FileRefs of the current tenant."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._async = sandbox

    def read(self, ref: FileRef | str) -> bytes:
        """The bytes of a FileRef the current tenant owns; ``MAIN-SANDBOX-0008`` otherwise."""
        return _LOOP.call(self._async.files.read(ref))


def create_sandbox(deps: SandboxDeps | Mapping[str, Any] | None = None) -> Sandbox:
    """Build a ``Sandbox`` from ``deps``."""
    return Sandbox(deps)
