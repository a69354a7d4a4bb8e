"""A notebook session's sandbox lives as long as its cells come, and is never asked to live past E2B's maximum.

Core's cell kernel is one command with no deadline of its own; each cell is a file write. The sandbox is
created for the session's idle time plus a command's timeout, so the driver pushes its end back when a cell's
write finds less than that left. Replayed from ``cassettes/lifetime/``, authored by
``authoring/packages.py`` from this module's own scenario against ``fake_e2b.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from mainsdk import AsyncSandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_conformance.replay import ReplayServer
from mainsdk_e2b.driver import E2BBox
from test_packages import KEY, provider

from mainsdk_e2b import e2b_sandbox_driver

CASSETTES = Path(__file__).parent / "cassettes" / "lifetime"


def a_session_kept_alive_by_its_cells(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """Two cells; before the second, the sandbox's end is made near, as after a long quiet notebook."""

    async def scenario() -> dict[str, Any]:
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 60s}}\n")
        driver = e2b_sandbox_driver(api_key=key, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
        sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver))
        seen: dict[str, Any] = {}
        try:
            async with await sandbox.create(idle="5m") as session:
                first = await session.run_code("x = 41")
                box = session.opened.box
                assert isinstance(box, E2BBox)
                box.expires = time.monotonic() + 5  # what 7 quiet minutes of a 420 s lifetime would leave
                before = len(server.received)
                second = await session.run_code("x + 1")
                seen["cells"] = (first.ok, second.text)
                seen["second_cell"] = [(r.method, r.path) for r in server.received[before:]]
                seen["lifetime"] = box.lifetime
        finally:
            await sandbox.aclose()
        return seen

    return asyncio.run(scenario())


def test_a_cells_write_pushes_the_sandboxs_end_back_within_e2bs_maximum() -> None:
    with provider("a_session_kept_alive_by_its_cells", folder=CASSETTES) as server:
        seen = a_session_kept_alive_by_its_cells(server)
    assert server.problems(final=True) == []
    assert seen["cells"] == (True, "42")
    # idle 300 s + timeout 60 s + 60 s: the sandbox was created for 420 s; the cell's write found 5 s left.
    assert seen["lifetime"] == 420
    sandbox_id = seen["second_cell"][0][1].rsplit("/", 2)[1]
    assert seen["second_cell"] == [("POST", f"/sandboxes/{sandbox_id}/timeout"), ("POST", "/files")]
    data = json.loads((CASSETTES / "a_session_kept_alive_by_its_cells.json").read_text())
    asked = [
        i["request"]["body"]["json"]["timeout"]
        for i in data["interactions"]
        if i["request"]["path"].endswith("/timeout")
    ]
    assert asked == [300 + 60 + 420]  # one more cell's worth of work and idle time, plus the lifetime: under 1 h
