"""Transfers to and from a box get a deadline that grows with their bytes, not the 30 s of every other call.

In e2b 2.63 a buffered upload's request timeout bounds the whole transfer, as does an explicit read timeout
(``e2b/sandbox_async/filesystem/filesystem.py``, the pyqwest transport); a fixed deadline failed any package set
that needed longer on the user's link. Tested against the stand-in with a slow link (``stand_in.py``,
``STATE.uplink``/``STATE.downlink``): the driver's request timeout is made 1 s so that a 2-second transfer of
400 KB stands for a 53.8 MB package set on a few Mbit/s.

Measured on e2b 2.63 against the stand-in (plain HTTP/1.1 on loopback): the upload's request timeout is its
whole-request deadline (the driver before this change failed both upload tests with 0006 "timed out"), but a read
of 2 s came back under a 1 s request timeout, streamed or not, so the read tests pass on that driver too. They
hold the property should the SDK or its transport bound the whole read, as its docstring says it does.
"""

from __future__ import annotations

import asyncio

import pytest
from e2b_replay import KEY
from mainsdk.driver import BoxSpec, Folder, RunLimits
from mainsdk_e2b.transfer import MIN_RATE, transfer_deadline
from stand_in import stand_in

from mainsdk_e2b import E2BDriver

PAYLOAD = bytes(range(256)) * 1600  # 400 KB: 2 s at the stand-in's 200 kB/s
RATE = 200_000


def _driver(api: str, sandbox: str) -> E2BDriver:
    return E2BDriver(api_key=KEY, api_url=api, sandbox_url=sandbox, request_timeout=1.0)


def _spec(**extra: object) -> BoxSpec:
    limits = RunLimits(timeout=10.0, memory=0, output=0, files=1 << 20, disk=0)
    return BoxSpec(id="ses_0123456789abcdef01234567", limits=limits, tenant="default", idle=60.0, **extra)  # type: ignore[arg-type]


def test_an_upload_slower_than_the_request_timeout_lands() -> None:
    with stand_in(uplink=RATE) as (api, sandbox, state):
        driver = _driver(api, sandbox)

        async def scenario() -> bytes:
            box = await driver.mainsdk_driver_start(_spec(files={"big.bin": PAYLOAD}))
            try:
                return state.boxes[box.sandbox_id].map("/home/user/work/big.bin").read_bytes()  # type: ignore[no-any-return]
            finally:
                await driver.mainsdk_driver_stop(box)

        assert asyncio.run(scenario()) == PAYLOAD  # 2 s on the link, past the 1 s request timeout


def test_a_session_write_and_read_slower_than_the_request_timeout_land() -> None:
    with stand_in(uplink=RATE, downlink=RATE) as (api, sandbox, _state):
        driver = _driver(api, sandbox)

        async def scenario() -> bytes:
            box = await driver.mainsdk_driver_start(_spec())
            try:
                await driver.mainsdk_driver_write_file(box=box, folder=Folder.OUT, path="r.bin", data=PAYLOAD)
                return await driver.mainsdk_driver_read_file(box=box, folder=Folder.OUT, path="r.bin")
            finally:
                await driver.mainsdk_driver_stop(box)

        assert asyncio.run(scenario()) == PAYLOAD


@pytest.mark.parametrize(
    ("nbytes", "left", "deadline"),
    [
        (0, 3600.0, 30.0),  # nothing to send: the request's own bound
        (53_800_000, 3600.0, 30.0 + 53_800_000 / MIN_RATE),  # the package set: 430 s at 1 Mbit/s, plus the bound
        (53_800_000, 100.0, 100.0),  # never past the plan's cap: E2B ends the sandbox there
        (53_800_000, 5.0, 30.0),  # and never under the request's own bound
    ],
)
def test_a_transfers_deadline_grows_with_its_bytes_up_to_the_cap(nbytes: int, left: float, deadline: float) -> None:
    assert transfer_deadline(nbytes, 30.0, left) == pytest.approx(deadline)


def test_an_out_folder_slower_to_read_than_the_request_timeout_comes_back() -> None:
    """A run whose out file takes 2 s to come over the link: the archive's read has the time its bytes need."""
    from mainsdk import Sandbox, SandboxDeps
    from mainsdk.config import load_config_text

    config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 20s, files: 1MB}}\n")
    code = f"open('../out/r.bin', 'wb').write(bytes(range(256)) * {len(PAYLOAD) // 256})"
    with stand_in(downlink=RATE) as (api, url, _state):
        sandbox = Sandbox(SandboxDeps(config=config, driver=_driver(api, url)))
        try:
            result = sandbox.run(code)
            files = {ref.name: sandbox.files.read(ref) for ref in result.files}
        finally:
            sandbox.close()
    assert result.exit_code == 0, result.stderr
    assert files == {"r.bin": PAYLOAD}
