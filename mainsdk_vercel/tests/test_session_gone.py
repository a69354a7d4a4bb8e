"""A box whose Vercel sandbox has stopped is gone for good: BoxGone (0008), never a retryable 0006 forever."""

from __future__ import annotations

import asyncio

import pytest
from mainsdk.driver import BoxSpec, Command, Folder, RunLimits
from mainsdk.errors import NO_SESSION, BoxGone
from mainsdk_vercel.driver import VercelBox, vercel_sandbox_driver


class _Sink:
    def stdout(self, data: bytes) -> None:
        raise AssertionError("nothing runs on a stopped sandbox")

    def stderr(self, data: bytes) -> None:
        raise AssertionError("nothing runs on a stopped sandbox")

    def host_refused(self, host: str) -> None:
        pass


def test_every_call_on_a_stopped_sandbox_is_box_gone_and_nothing_is_sent() -> None:
    # base_url points nowhere: a request would fail as an outage, so BoxGone proves none was made.
    driver = vercel_sandbox_driver(token="t" * 24, project="prj_x", base_url="http://127.0.0.1:9")
    limits = RunLimits(timeout=5.0, memory=64 << 20, output=1 << 20, files=1 << 20, disk=64 << 20)
    box = VercelBox("ses_1", BoxSpec(id="ses_1", limits=limits, idle=60.0), session=True, session_id="sbx_1")
    box.gone = True  # as after Vercel answered 410 sandbox_stopped

    async def calls() -> None:
        for call in (
            driver.mainsdk_driver_exec(box, Command("python3", ("-c", "1")), _Sink()),
            driver.mainsdk_driver_write_file(box, Folder.WORK, "a", b"x"),
            driver.mainsdk_driver_read_file(box, Folder.WORK, "a"),
        ):
            with pytest.raises(BoxGone) as caught:
                await call
            assert (caught.value.code, caught.value.ran, caught.value.retryable) == (NO_SESSION, False, False)

    asyncio.run(calls())
