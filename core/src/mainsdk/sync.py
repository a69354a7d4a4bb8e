"""``Sandbox``: the synchronous twin of ``AsyncSandbox``, driving it on a private event loop thread.

One loop thread serves every synchronous sandbox in the process, so a driver's
long-lived clients stay on one loop. Interrupting a call (Ctrl-C) cancels the
run there and waits for the driver to clean up before re-raising.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from decimal import Decimal
from typing import Any, Concatenate, ParamSpec, TypeVar

from mainsdk import arguments, errors
from mainsdk.action import CodeRunAction
from mainsdk.background import AsyncProcess
from mainsdk.cells import CellCallbacks, CellError, CellResult
from mainsdk.checkpoints import Snapshot
from mainsdk.driver import Capabilities
from mainsdk.engine import AsyncSandbox, SandboxDeps
from mainsdk.errors import SandboxError
from mainsdk.files import FileRef
from mainsdk.interpreters import AsyncInterpreter, run_in
from mainsdk.rich import RichResult
from mainsdk.secrets import SecretRef
from mainsdk.sessions import AsyncSession, SessionOpener, run_cell

T = TypeVar("T")
A = TypeVar("A")
P = ParamSpec("P")
log = logging.getLogger("mainsdk")


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def _get_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="mainsdk-sandbox", daemon=True)
                self._thread.start()
                self._loop = loop
            return self._loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._thread is not None and threading.current_thread() is self._thread:
            # A callback (on_output) runs on the loop thread: waiting there for the loop would wait forever.
            coro.close()
            raise SandboxError(
                errors.INVALID_OPTION,
                "a synchronous Sandbox call was made from on_output (or another callback the sandbox runs), which "
                "would deadlock: use async_sandbox (AsyncSandbox) and await the call, or hand the work to a thread",
            )
        _warn_inside_a_loop()
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
_warned_inside_a_loop: list[bool] = []  # the warning below is logged once per process


def _warn_inside_a_loop() -> None:
    """Log once that a synchronous call runs inside the caller's running event loop, which it blocks meanwhile."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    if not _warned_inside_a_loop:
        _warned_inside_a_loop.append(True)
        log.warning(
            "a synchronous mainsdk.sandbox call runs inside a running event loop, which it blocks until the call "
            "returns (no other task runs meanwhile); in async code use mainsdk.async_sandbox: "
            "`await async_sandbox.run(...)`, `async with async_sandbox.create(...) as session:`"
        )


def _blocking(
    method: Callable[Concatenate[A, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[Any, P], T]:
    """The synchronous twin of an async method (of the object a twin holds as ``_async``): same arguments, same
    docstring, result returned."""

    @functools.wraps(method)
    def blocking(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return _LOOP.call(method(self._async, *args, **kwargs))

    return blocking


@arguments.checked_calls("sandbox")
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

    def action(self, **options: Any) -> BlockingAction:
        """A code-runner action for agents; see ``AsyncSandbox.action``. Its ``run(input)`` blocks."""
        action = self._async.action(**options)
        return BlockingAction(
            self._async,
            name=action.name,
            intent=action.intent,
            languages=action.languages,
            risk=action.risk,
            feature=action.feature,
            session=action.session,
            network=action.network,
            egress=action.egress,
        )

    def create(self, **options: Any) -> Session:
        """Open a session; see ``AsyncSandbox.create`` for the options. Use it as ``with``; it closes on exit."""
        return Session(_LOOP.call(_awaited(self._async.create(**options))))

    def resume(self, session_id: str) -> Session:
        """``AsyncSandbox.resume``: the paused session ``session_id`` of the current tenant, running again."""
        return Session(_LOOP.call(self._async.resume(session_id)))

    def snapshots(self) -> list[Snapshot]:
        """``AsyncSandbox.snapshots``: the current tenant's snapshots, oldest first."""
        return self._async.snapshots()

    delete_snapshot = _blocking(AsyncSandbox.delete_snapshot)

    def get(self, session_id: str) -> Session:
        """The open session ``session_id`` of the current tenant; ``MAIN-SANDBOX-0008`` otherwise."""
        return Session(_LOOP.call(self._async.get(session_id)))

    def close(self) -> None:
        """Release what the driver holds for this process."""
        _LOOP.call(self._async.aclose())


@arguments.checked_calls("action")
class BlockingAction(CodeRunAction):
    """A code-runner action whose ``run`` is synchronous."""

    def run(
        self, input: Mapping[str, Any], *, agent: str | None = None, conversation: str | None = None
    ) -> dict[str, Any]:
        """Run the input; see ``CodeRunAction.arun``."""
        return _LOOP.call(self.arun(input, agent=agent, conversation=conversation))

    def close(self, conversation: str | None = None, *, agent: str | None = None) -> None:
        """With ``session=True``: close the conversation's session; see ``CodeRunAction.aclose``."""
        _LOOP.call(self.aclose(conversation, agent=agent))

    def read(self, file_id: str) -> bytes:
        """The bytes of an out file a run of this action returned; see ``CodeRunAction.aread``."""
        return _LOOP.call(self.aread(file_id))


async def _awaited(opener: SessionOpener) -> AsyncSession:
    return await opener


@arguments.checked_calls("session")
class Session:
    """The synchronous twin of ``AsyncSession``: an open box, used as ``with``."""

    def __init__(self, session: AsyncSession) -> None:
        self._async = session

    @property
    def id(self) -> str:
        """The session id, for ``sandbox.get``."""
        return self._async.id

    @property
    def cost(self) -> Decimal:
        """What the session's commands have cost so far."""
        return self._async.cost

    @property
    def closed(self) -> bool:
        """Whether the session is closed."""
        return self._async.closed

    @property
    def paused(self) -> bool:
        """Whether the session is paused (``AsyncSession.paused``)."""
        return self._async.paused

    pause = _blocking(AsyncSession.pause)
    snapshot = _blocking(AsyncSession.snapshot)

    def fork(self, count: int = 1) -> list[Session | SandboxError]:
        """``AsyncSession.fork``: ``count`` new sessions from this one's files, each a ``Session`` or its error."""
        forks = _LOOP.call(self._async.fork(count))
        return [Session(f) if isinstance(f, AsyncSession) else f for f in forks]

    write = _blocking(AsyncSession.write)
    read = _blocking(AsyncSession.read)
    run = _blocking(AsyncSession.run)

    def start(self, program: str, args: Sequence[str] = (), **options: Any) -> Process:
        """Start ``program`` in the background and return its handle; see ``AsyncSession.start``."""
        return Process(_LOOP.call(_started(self._async, program, args, options)))

    def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        timeout: object = None,
        on_output: Callable[[str, bytes], None] | None = None,
        on_result: Callable[[RichResult], None] | None = None,
        on_error: Callable[[CellError], None] | None = None,
        env: Mapping[str, str | SecretRef] | None = None,
    ) -> CellResult:
        """Run ``code`` as a cell in the session's default interpreter of ``language``; see ``AsyncSession.run_code``
        (``env`` included).

        The callbacks are plain functions, called on the sandbox's own thread; an ``async def`` is refused with
        MAIN-SANDBOX-0001 (nothing here could await it): use ``AsyncSandbox`` for async callbacks.
        """
        callbacks = CellCallbacks(on_output, on_result, on_error)
        return _LOOP.call(run_cell(self._async, code, language, timeout, callbacks, blocking=True, env=env))

    def interpreter(self, language: str = "python", *, cwd: str | None = None, name: str | None = None) -> Interpreter:
        """Open another interpreter in the session's box, with its own state; see ``AsyncSession.interpreter``."""
        return Interpreter(_LOOP.call(_opened(self._async, language, cwd, name)))

    def interpreters(self) -> list[Interpreter]:
        """The session's open interpreters, in the order they were opened; see ``AsyncSession.interpreters``."""
        return [Interpreter(i) for i in self._async.interpreters()]

    close = _blocking(AsyncSession.close)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _started(session: AsyncSession, program: str, args: Sequence[str], options: dict[str, Any]) -> AsyncProcess:
    return session.start(program, args, **options)  # on the loop: the process's task lives there


async def _opened(session: AsyncSession, language: str, cwd: str | None, name: str | None) -> AsyncInterpreter:
    return session.interpreter(language, cwd=cwd, name=name)  # on the loop, where its kernel will run


@arguments.checked_calls("interpreter")
class Interpreter:
    """The synchronous twin of ``AsyncInterpreter``: one interpreter in a session's box, used as ``with``."""

    def __init__(self, interpreter: AsyncInterpreter) -> None:
        self._async = interpreter

    @property
    def id(self) -> str:
        """Its id (``interp_...``), on the audit event of each of its cells."""
        return self._async.id

    @property
    def language(self) -> str:
        """Its language."""
        return self._async.language

    @property
    def cwd(self) -> str | None:
        """The folder its cells run in, as given; None: the session's work folder."""
        return self._async.cwd

    @property
    def name(self) -> str | None:
        """The name it was opened with, if any."""
        return self._async.name

    @property
    def default(self) -> bool:
        """Whether it is the session's default interpreter of its language (the one ``session.run_code`` uses)."""
        return self._async.default

    @property
    def closed(self) -> bool:
        """Whether it is closed."""
        return self._async.closed

    def run_code(
        self,
        code: str,
        *,
        timeout: object = None,
        on_output: Callable[[str, bytes], None] | None = None,
        on_result: Callable[[RichResult], None] | None = None,
        on_error: Callable[[CellError], None] | None = None,
        env: Mapping[str, str | SecretRef] | None = None,
    ) -> CellResult:
        """Run ``code`` as a cell in this interpreter; see ``Session.run_code`` (plain-function callbacks, ``env``)."""
        callbacks = CellCallbacks(on_output, on_result, on_error)
        return _LOOP.call(run_in(self._async, code, timeout, callbacks, blocking=True, env=env))

    restart = _blocking(AsyncInterpreter.restart)
    close = _blocking(AsyncInterpreter.close)

    def __enter__(self) -> Interpreter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __eq__(self, other: object) -> bool:
        # Twins made at different calls (``interpreter()``, each ``interpreters()``) of one interpreter are equal.
        return isinstance(other, Interpreter) and other._async is self._async

    def __hash__(self) -> int:
        return hash(id(self._async))

    def __repr__(self) -> str:
        return repr(self._async).replace("<AsyncInterpreter", "<Interpreter", 1)


@arguments.checked_calls("process")
class Process:
    """The synchronous twin of ``AsyncProcess``: a program running in the background of a session."""

    def __init__(self, process: AsyncProcess) -> None:
        self._async = process

    @property
    def id(self) -> str:
        """The process's command id (its audit event's)."""
        return self._async.id

    @property
    def running(self) -> bool:
        """Whether it is still running."""
        return self._async.running

    def output(self) -> tuple[str, str]:
        """Its stdout and stderr so far, redacted."""
        return self._async.output()

    wait = _blocking(AsyncProcess.wait)
    kill = _blocking(AsyncProcess.kill)


@arguments.checked_calls("sandbox.files")
class Files:
    """The FileRefs of the current tenant."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._async = sandbox

    def read(self, ref: FileRef | str) -> bytes:
        """The bytes of a FileRef the current tenant owns; ``MAIN-SANDBOX-0008`` otherwise."""
        return _LOOP.call(self._async.files.read(ref))


@arguments.checked_function("create_sandbox")
def create_sandbox(deps: SandboxDeps | Mapping[str, Any] | None = None) -> Sandbox:
    """Build a ``Sandbox`` from ``deps``."""
    return Sandbox(deps)
