"""Snapshots, pause and resume on Vercel's own calls, against the stand-in's states (issue 33).

The stand-in (``conformance/simulator.py``) is no kinder than Vercel: a snapshot stops its source (``snapshotting``,
then ``stopped``: vercel-sandbox 0.10.0 ``create_snapshot``, ``SandboxStatus``), a stopped sandbox takes no request
(410), a sandbox is not deleted while it snapshots, and a deleted or expired snapshot starts nothing (404). The
suite's ``TestCheckpoints`` and ``TestPause`` replay the same calls from cassettes authored against it; these look
at what is left on Vercel's side.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk.driver import BoxSpec, Folder, RunLimits, SandboxError
from mainsdk.errors import NO_SESSION

from mainsdk_vercel import VercelDriver, vercel_sandbox_driver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
Simulator: Any = importlib.import_module("simulator").Simulator
LIMITS = RunLimits(timeout=10.0, memory=0, output=0, files=1 << 20, disk=0)


def _spec(number: int, snapshot: str | None = None) -> BoxSpec:
    return BoxSpec(id=f"ses_{number:024x}", limits=LIMITS, tenant="default", idle=60.0, snapshot=snapshot)


@pytest.fixture
def sim() -> Iterator[Any]:
    started = Simulator(pending=0)
    started.start()
    yield started
    started.stop()


def _driver(sim: Any) -> VercelDriver:
    return vercel_sandbox_driver(token=sim.token, project="prj_x", base_url=sim.url)


def _calls(sim: Any, since: int) -> list[str]:
    return [f"{r['method']} {r['path']}" for r in sim.requests[since:] if r["method"] != "GET"]


def test_a_snapshot_stops_the_source_and_the_driver_opens_it_again_from_the_snapshot(sim: Any) -> None:
    driver = _driver(sim)

    async def scenario() -> tuple[str, str, float | None, bytes, bytes, list[str]]:
        box = await driver.mainsdk_driver_start(_spec(1))
        try:
            await driver.mainsdk_driver_write_file(box=box, folder=Folder.WORK, path="a.txt", data=b"alpha")
            before, mark = str(box.session_id), len(sim.requests)
            expires = await driver.mainsdk_driver_snapshot(box=box, snapshot_id="snp_1", kind="filesystem")
            calls = _calls(sim, mark)
            seen = await driver.mainsdk_driver_read_file(box=box, folder=Folder.WORK, path="a.txt")
            fork = await driver.mainsdk_driver_start(_spec(2, snapshot="snp_1"))
            try:
                forked = await driver.mainsdk_driver_read_file(box=fork, folder=Folder.WORK, path="a.txt")
            finally:
                await driver.mainsdk_driver_stop(fork)
            return before, str(box.session_id), expires, seen, forked, calls
        finally:
            await driver.mainsdk_driver_stop(box)

    before, after, expires, seen, forked, calls = asyncio.run(scenario())
    assert calls == [
        f"POST /v2/sandboxes/sessions/{before}/snapshot",
        f"DELETE /v2/sandboxes/mainsdk-ses-{1:024x}",  # only once the source is stopped, not while it snapshots
        "POST /v3/sandboxes",
    ]
    assert after != before and before not in sim.sandboxes  # a new VM under the same name
    assert (seen, forked) == (b"alpha", b"alpha")
    # Vercel's lifetime for it (the stand-in's 7 days), counted on our clock.
    assert expires is not None and abs(expires - (time.time() + 7 * 86400)) < 60


def test_a_snapshot_vercel_no_longer_has_starts_nothing_and_is_a_0008(sim: Any) -> None:
    driver = _driver(sim)

    async def scenario() -> SandboxError:
        box = await driver.mainsdk_driver_start(_spec(3))
        try:
            await driver.mainsdk_driver_snapshot(box=box, snapshot_id="snp_2", kind="filesystem")
            for _, view in sim.snapshots.values():
                view["expiresAt"] = int(time.time() * 1000) - 1  # expired on Vercel's side first
            with pytest.raises(SandboxError) as caught:
                await driver.mainsdk_driver_start(_spec(4, snapshot="snp_2"))
            return caught.value
        finally:
            await driver.mainsdk_driver_stop(box)

    refused = asyncio.run(scenario())
    assert refused.code == NO_SESSION and "no snapshot 'snp_2'" in refused.message
    assert not refused.ran and "snapshot_not_found" in refused.message
    assert not any(s.name == f"mainsdk-ses-{4:024x}" for s in sim.sandboxes.values())


def test_pause_leaves_the_sandbox_stopped_and_resume_brings_the_files_back_and_deletes_its_snapshot(sim: Any) -> None:
    driver = _driver(sim)

    async def scenario() -> tuple[str, SandboxError, bytes, list[str]]:
        box = await driver.mainsdk_driver_start(_spec(5))
        try:
            await driver.mainsdk_driver_write_file(box=box, folder=Folder.WORK, path="a.txt", data=b"kept")
            await driver.mainsdk_driver_pause(box)
            status = sim.sandboxes[str(box.session_id)].status
            with pytest.raises(SandboxError) as caught:  # nothing runs in a paused (stopped) sandbox
                await driver.mainsdk_driver_read_file(box=box, folder=Folder.WORK, path="a.txt")
            await driver.mainsdk_driver_resume(box)
            kept = await driver.mainsdk_driver_read_file(box=box, folder=Folder.WORK, path="a.txt")
            return status, caught.value, kept, [view["status"] for _, view in sim.snapshots.values()]
        finally:
            await driver.mainsdk_driver_stop(box)

    status, refused, kept, snapshots = asyncio.run(scenario())
    assert status == "snapshotting" and kept == b"kept"
    assert refused.code == NO_SESSION
    assert snapshots == ["deleted"]  # the pause's snapshot goes once the sandbox runs from it


def test_closing_a_paused_session_deletes_its_snapshot(sim: Any) -> None:
    driver = _driver(sim)

    async def scenario() -> None:
        box = await driver.mainsdk_driver_start(_spec(6))
        await driver.mainsdk_driver_pause(box)
        await driver.mainsdk_driver_stop(box)

    asyncio.run(scenario())
    assert [view["status"] for _, view in sim.snapshots.values()] == ["deleted"]


def test_a_resume_that_fails_keeps_the_paused_files_for_the_next_resume(sim: Any) -> None:
    driver = _driver(sim)
    quick = RunLimits(timeout=1.0, memory=0, output=0, files=1 << 20, disk=0)
    spec = BoxSpec(id=f"ses_{7:024x}", limits=quick, tenant="default", idle=60.0)

    async def scenario() -> tuple[SandboxError, list[str], bytes]:
        box = await driver.mainsdk_driver_start(spec)
        try:
            await driver.mainsdk_driver_write_file(box=box, folder=Folder.WORK, path="a.txt", data=b"kept")
            await driver.mainsdk_driver_pause(box)
            sim.pending = 10**6  # the new VM never boots within the run's time limit: the create fails
            with pytest.raises(SandboxError) as caught:
                await driver.mainsdk_driver_resume(box)
            left = [view["status"] for _, view in sim.snapshots.values()]
            sim.pending = 0
            await driver.mainsdk_driver_resume(box)
            return caught.value, left, await driver.mainsdk_driver_read_file(box=box, folder=Folder.WORK, path="a.txt")
        finally:
            await driver.mainsdk_driver_stop(box)

    failed, left, kept = asyncio.run(scenario())
    assert failed.retryable and "pending" in failed.message
    assert left == ["created"] and kept == b"kept"
