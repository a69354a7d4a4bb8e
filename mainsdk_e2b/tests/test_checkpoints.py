"""Pause, resume and snapshots on E2B's own calls, against the stand-in's states (issue 33).

The stand-in (``stand_in.py``) holds a sandbox's state as E2B's API does: a paused sandbox's envd is not reachable,
a second pause is a 409 (``handlers/sandbox_pause.go``; the SDK answers False), ``connect`` resumes a paused one
and only keeps a running one alive (``sandbox_connect.go``), a snapshot is a template a create starts from
(``snapshot_template_create.go``) and ``DELETE /templates/{id}`` forgets it. The suite's ``TestCheckpoints`` and
``TestPause`` replay the same calls from cassettes authored against it.
"""

from __future__ import annotations

import asyncio

import pytest
from e2b_replay import KEY
from mainsdk.driver import BoxSpec, Folder, RunLimits, SandboxError
from mainsdk.errors import DRIVER_UNAVAILABLE, NO_SESSION
from stand_in import stand_in

from mainsdk_e2b import e2b_sandbox_driver

LIMITS = RunLimits(timeout=10.0, memory=0, output=0, files=1 << 20, disk=0)


def _spec(number: int, snapshot: str | None = None) -> BoxSpec:
    return BoxSpec(id=f"ses_{number:024x}", limits=LIMITS, tenant="default", idle=60.0, snapshot=snapshot)


def test_a_second_pause_and_a_second_resume_are_harmless_and_the_files_stay() -> None:
    with stand_in() as (api, url, state):
        driver = e2b_sandbox_driver(api_key=KEY, api_url=api, sandbox_url=url)

        async def scenario() -> tuple[str, bytes, SandboxError]:
            box = await driver.mainsdk_driver_start(_spec(1))
            try:
                await driver.mainsdk_driver_write_file(box=box, folder=Folder.WORK, path="a.txt", data=b"kept")
                await driver.mainsdk_driver_pause(box)
                await driver.mainsdk_driver_pause(box)  # E2B's 409, which the SDK answers False
                paused = state.boxes[box.sandbox_id].state
                with pytest.raises(SandboxError) as caught:  # nothing reaches a paused sandbox's envd
                    await driver.mainsdk_driver_read_file(box=box, folder=Folder.WORK, path="a.txt")
                await driver.mainsdk_driver_resume(box)
                await driver.mainsdk_driver_resume(box)  # a running sandbox: connect only keeps it alive
                kept = await driver.mainsdk_driver_read_file(box=box, folder=Folder.WORK, path="a.txt")
                return paused, kept, caught.value
            finally:
                await driver.mainsdk_driver_stop(box)

        paused, kept, refused = asyncio.run(scenario())
    assert paused == "paused" and kept == b"kept"
    assert refused.code == DRIVER_UNAVAILABLE and "the sandbox is gone" in refused.message


def test_a_box_from_a_snapshot_has_its_files_and_a_deleted_one_starts_none() -> None:
    with stand_in() as (api, url, state):
        driver = e2b_sandbox_driver(api_key=KEY, api_url=api, sandbox_url=url)

        async def scenario() -> tuple[bytes, bytes, SandboxError]:
            source = await driver.mainsdk_driver_start(_spec(2))
            try:
                await driver.mainsdk_driver_write_file(box=source, folder=Folder.WORK, path="a.txt", data=b"alpha")
                assert await driver.mainsdk_driver_snapshot(box=source, snapshot_id="snp_1", kind="filesystem") is None
                await driver.mainsdk_driver_write_file(box=source, folder=Folder.WORK, path="a.txt", data=b"later")
                fork = await driver.mainsdk_driver_start(_spec(3, snapshot="snp_1"))
                try:
                    seen = await driver.mainsdk_driver_read_file(box=fork, folder=Folder.WORK, path="a.txt")
                finally:
                    await driver.mainsdk_driver_stop(fork)
                now = await driver.mainsdk_driver_read_file(box=source, folder=Folder.WORK, path="a.txt")
                await driver.mainsdk_driver_delete_snapshot(snapshot_id="snp_1")
                with pytest.raises(SandboxError) as caught:
                    await driver.mainsdk_driver_start(_spec(4, snapshot="snp_1"))
                return seen, now, caught.value
            finally:
                await driver.mainsdk_driver_stop(source)

        seen, now, refused = asyncio.run(scenario())
        assert not state.templates  # E2B's template went with the delete
    assert (seen, now) == (b"alpha", b"later")  # the snapshot's files; the source ran on
    assert refused.code == NO_SESSION and "no snapshot 'snp_1'" in refused.message
