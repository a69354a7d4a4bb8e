"""The synchronous API used from async code (issue 35, point 4) says where the async API is.

Before, ``await sandbox.run(...)`` ran the code, then raised Python's ``TypeError: object RunResult can't be used in
'await' expression``; a synchronous call inside a running event loop blocked it with nothing said; and
``with async_sandbox.create()`` was Python's "does not support the context manager protocol".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from mainsdk import async_sandbox, sandbox
from mainsdk import sync as mainsdk_sync


def test_awaiting_a_synchronous_run_names_async_sandbox(app_dir: Callable[[str], Path]) -> None:
    async def main() -> None:
        await sandbox.run("print(1)")

    with pytest.raises(TypeError) as error:
        asyncio.run(main())
    assert "await async_sandbox.run(...)" in str(error.value)
    assert "already ran the code" in str(error.value)


def test_a_synchronous_call_inside_a_running_loop_is_logged_once(
    app_dir: Callable[[str], Path], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mainsdk_sync, "_warned_inside_a_loop", [])

    async def main() -> list[str]:
        return [sandbox.run("print(1)").stdout, sandbox.run("print(2)").stdout]

    with caplog.at_level(logging.WARNING, logger="mainsdk"):
        assert asyncio.run(main()) == ["1\n", "2\n"]
        assert sandbox.run("print(3)").stdout == "3\n"  # outside a loop: nothing said
    said = [r.getMessage() for r in caplog.records if "inside a running event loop" in r.getMessage()]
    assert len(said) == 1, said
    assert "await async_sandbox.run(...)" in said[0]


def test_with_on_async_sandbox_create_names_async_with(app_dir: Callable[[str], Path]) -> None:
    with pytest.raises(TypeError) as error, async_sandbox.create():
        pass
    assert "async with async_sandbox.create(...) as session:" in str(error.value)
