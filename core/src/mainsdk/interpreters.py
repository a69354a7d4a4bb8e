"""Interpreters: several in one session's box, each with its language, folder and state (E2B's code contexts).

``session.interpreter(language=..., cwd=...)`` opens one; ``session.interpreters()`` lists those open;
``session.run_code(code, language=...)`` runs in the session's default interpreter of that language, opened on
its first cell. Each is one kernel (``mainsdk.cells.Kernel``): one long exec in the box, started on its first
cell, whose cells keep their limits, redaction, cost and audit event (which names the interpreter's id).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from mainsdk import arguments, languages
from mainsdk.cells import (
    CellCallbacks,
    CellResult,
    ErrorCallback,
    Kernel,
    OutputCallback,
    ResultCallback,
    check_cells,
)
from mainsdk.secrets import SecretRef
from mainsdk.session_runtime import SessionRuntime


def interpreter_cwd(value: object) -> str | None:
    """An interpreter's folder in the box: None (the session's work folder), or a path, relative to the work
    folder or absolute; MAIN-SANDBOX-0001 otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        shown = arguments.type_name(value)
        raise arguments.invalid("cwd", f"must be a folder in the box as a string, or None, not {shown}")
    if not value.strip():
        raise arguments.invalid("cwd", "is empty; pass a folder in the box, or None for the session's work folder")
    return arguments.text(value, "cwd", max_bytes=arguments.MAX_PATH_BYTES)


@arguments.checked_calls("interpreter")
class AsyncInterpreter:
    """An interpreter in a session's box: its own variables, imports, language and working folder.

    ``run_code`` runs a cell in it, as ``session.run_code`` does in the session's default one. ``restart()``
    empties it (the next cell starts a new kernel); ``close()`` ends it for good (its calls then raise
    MAIN-SANDBOX-0008), as closing the session does. Use it as ``async with`` to close it on exit.
    """

    def __init__(self, runtime: SessionRuntime, kernel: Kernel, name: str | None, *, default: bool) -> None:
        self._runtime = runtime
        self._kernel = kernel
        self._name = name
        self._default = default

    @property
    def id(self) -> str:
        """Its id (``interp_...``), on the audit event of each of its cells."""
        return self._kernel.id

    @property
    def language(self) -> str:
        """Its language: ``python``, ``javascript``, ``typescript`` or ``bash``."""
        return self._kernel.language

    @property
    def cwd(self) -> str | None:
        """The folder its cells run in, as given (relative to the session's work folder); None: the work folder."""
        return self._kernel.cwd

    @property
    def name(self) -> str | None:
        """The name it was opened with, if any (unique among the session's open interpreters)."""
        return self._name

    @property
    def default(self) -> bool:
        """Whether it is the session's default interpreter of its language (the one ``session.run_code`` uses)."""
        return self._default

    @property
    def closed(self) -> bool:
        """Whether it is closed (``close()``, or its session closed)."""
        return self._kernel.closed or self._runtime.closed

    async def run_code(
        self,
        code: str,
        *,
        timeout: object = None,
        on_output: OutputCallback | None = None,
        on_result: ResultCallback | None = None,
        on_error: ErrorCallback | None = None,
        env: Mapping[str, str | SecretRef] | None = None,
    ) -> CellResult:
        """Run ``code`` as a cell in this interpreter; see ``AsyncSession.run_code`` for the timeout, the
        callbacks, ``env`` and the result. Cells of one interpreter run one at a time; other interpreters run
        alongside."""
        return await run_in(self, code, timeout, CellCallbacks(on_output, on_result, on_error), env=env)

    async def restart(self) -> None:
        """Empty it: its kernel ends (after the running cell, if one runs) and the next cell starts a new one, with
        no variables or imports. A closed interpreter or session raises MAIN-SANDBOX-0008."""
        await self._kernel.restart()

    async def close(self) -> None:
        """End it now and for good (a cell running in it raises MAIN-SANDBOX-0008). Closing twice is fine."""
        await self._kernel.close()

    async def __aenter__(self) -> AsyncInterpreter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        name = f", name={self._name!r}" if self._name is not None else ""
        default = ", default=True" if self._default else ""
        closed = ", closed=True" if self.closed else ""
        return f"<AsyncInterpreter {self.id} language={self.language!r} cwd={self.cwd!r}{name}{default}{closed}>"


async def run_in(
    interpreter: AsyncInterpreter,
    code: object,
    timeout: object,
    callbacks: CellCallbacks,
    *,
    blocking: bool = False,
    env: Mapping[str, str | SecretRef] | None = None,
) -> CellResult:
    """``interpreter.run_code``, and the synchronous twin's with ``blocking`` (its callbacks are plain functions)."""
    return await interpreter._kernel.run(code, interpreter.language, timeout, callbacks, blocking=blocking, env=env)


class Interpreters:
    """A session's interpreters: those it opened, and its default one of each language."""

    def __init__(self, runtime: SessionRuntime) -> None:
        self._runtime = runtime
        self._open: list[AsyncInterpreter] = []
        self._defaults: dict[str, AsyncInterpreter] = {}
        self._restarted = False

    def mark_restarted(self) -> None:
        """The first default interpreter of each language says ``restarted`` on its first cell: the session's box
        was made from a filesystem snapshot, whose interpreters' state did not come along."""
        self._restarted = True
        self._restarted_languages: set[str] = set()

    def listed(self) -> list[AsyncInterpreter]:
        """Those open, in the order they were opened."""
        # Read only: the sync twin lists from the app's thread while the loop's thread may add one.
        return [i for i in self._open if not i.closed]

    def open(self, language: object, cwd: object, name: object) -> AsyncInterpreter:
        """A new interpreter; every argument checked first, and the driver's cells in that language: nothing
        starts in the box until its first cell."""
        checked_language = languages.cell_language(language)
        checked_cwd = interpreter_cwd(cwd)
        checked_name = arguments.optional_text(name, "name")
        check_cells(self._runtime, checked_language)
        self._runtime.check_open()
        if checked_name is not None and any(i.name == checked_name for i in self.listed()):
            raise arguments.invalid(
                "name",
                f"session {self._runtime.id} already has an open interpreter named {checked_name!r}; "
                "pick another name, or close that one first",
            )
        return self._add(checked_language, checked_cwd, checked_name, default=False)

    def default(self, language: str) -> AsyncInterpreter:
        """The session's default interpreter of ``language`` (a cell language), opened now if it has none."""
        found = self._defaults.get(language)
        if found is None or found.closed:
            found = self._defaults[language] = self._add(language, None, None, default=True)
        return found

    def _add(self, language: str, cwd: str | None, name: str | None, *, default: bool) -> AsyncInterpreter:
        # Not drawn from ``cells.token``: replays seed that for the kernels' tokens, which an id must not shift.
        kernel = Kernel(self._runtime, language, cwd, f"interp_{secrets.token_hex(6)}")
        if self._restarted and default and language not in self._restarted_languages:
            self._restarted_languages.add(language)
            kernel._started_before = True  # its first cell reports ``restarted``: see ``mark_restarted``
        interpreter = AsyncInterpreter(self._runtime, kernel, name, default=default)
        self._open = [*(i for i in self._open if not i._kernel.closed), interpreter]  # closed ones are ended
        return interpreter

    async def kill_all(self) -> None:
        """End every kernel (the session is closing)."""
        for interpreter in self._open:
            await interpreter._kernel.kill()
