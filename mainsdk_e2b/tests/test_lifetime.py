"""A notebook session's sandbox lives as long as its cells come, and is never asked to live past E2B's maximum.

Core's cell kernel is one command with no deadline of its own; each cell is a line on its live stdin (envd's
SendInput). The sandbox is created for the session's idle time plus a command's timeout, so the driver pushes
its end back when a cell's input finds less than that left. Replayed from ``cassettes/lifetime/``, authored by
``authoring/packages.py`` from this module's own scenario against ``fake_e2b.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from e2b_replay import KEY, key, provider
from mainsdk import AsyncSandbox, Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.driver import BoxSpec, Folder, RunLimits
from mainsdk.errors import INVALID_OPTION, NO_SESSION, ConfigError
from mainsdk_conformance.replay import ReplayServer
from mainsdk_e2b.config import E2BConfig
from mainsdk_e2b.driver import E2BBox
from stand_in import stand_in

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
                box = session._runtime.opened.box
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


def test_a_cells_input_pushes_the_sandboxs_end_back_within_e2bs_maximum() -> None:
    with provider("a_session_kept_alive_by_its_cells", folder=CASSETTES) as server:
        seen = a_session_kept_alive_by_its_cells(server, key())
    assert server.problems(final=True) == []
    assert seen["cells"] == (True, "42")
    # idle 300 s + timeout 60 s + 60 s: the sandbox was created for 420 s; the cell's input found 5 s left.
    assert seen["lifetime"] == 420
    sandbox_id = seen["second_cell"][0][1].rsplit("/", 2)[1]
    # The cell is one line on the kernel's live stdin (envd's SendInput), sent once the end is pushed back.
    # A refresh, which never shortens (sandbox_refresh.go), never POST /timeout, which may (sandbox_timeout.go).
    assert seen["second_cell"] == [
        ("POST", f"/sandboxes/{sandbox_id}/refreshes"),
        ("POST", "/process.Process/SendInput"),
    ]
    data = json.loads((CASSETTES / "a_session_kept_alive_by_its_cells.json").read_text())
    assert not [i for i in data["interactions"] if i["request"]["path"].endswith("/timeout")]
    asked = [
        i["request"]["body"]["json"]["duration"]
        for i in data["interactions"]
        if i["request"]["path"].endswith("/refreshes")
    ]
    assert asked == [300 + 60 + 420]  # one more cell's worth of work and idle time, plus the lifetime: under 1 h


def a_session_at_e2bs_maximum(server: ReplayServer, key: str = KEY) -> dict[str, Any]:
    """Sessions on the Base plan (1 h from a sandbox's start): a long idle time, a cell cut at the cap, then none.

    The cap is made near (or passed) as ``test_a_cells_input_...`` makes the end near: by the box's clock, as after
    59 minutes of a notebook, since a test cannot wait an hour.
    """

    async def scenario() -> dict[str, Any]:
        config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 60s}}\n")
        driver = e2b_sandbox_driver(api_key=key, api_url=server.url("api"), sandbox_url=server.url("sandbox"))
        sandbox = AsyncSandbox(SandboxDeps(config=config, driver=driver))
        seen: dict[str, Any] = {}
        try:
            # Idle 2 h: more than E2B lets a sandbox live, so the create asks for the cap, not 2 h + 2 min.
            async with await sandbox.create(idle="2h") as session:
                box = session._runtime.opened.box
                assert isinstance(box, E2BBox)
                # The kernel's IPython first (what a first cell installs: seconds on the authoring host), then the
                # cap, before the kernel starts: it comes during the second cell.
                await driver.mainsdk_driver_kernel_site(box=box, language="python")
                box.cap_at = time.monotonic() + 6
                seen["first"] = (await session.run_code("x = 41")).ok
                started = time.monotonic()
                with pytest.raises(SandboxError) as during:
                    await session.run_code("import time\ntime.sleep(20)\nx + 1")
                seen["during"] = (during.value, time.monotonic() - started)
                with pytest.raises(SandboxError) as after:
                    await session.run_code("x")
                seen["after"] = after.value
            async with await sandbox.create() as other:
                box = other._runtime.opened.box
                assert isinstance(box, E2BBox)
                box.cap_at = time.monotonic() - 1  # already past: nothing is sent
                before = len(server.received)
                with pytest.raises(SandboxError) as passed:
                    await other.run("python3", ["-c", "print(1)"])
                seen["passed"] = (passed.value, [(r.method, r.path) for r in server.received[before:]])
        finally:
            await sandbox.aclose()
        return seen

    return asyncio.run(scenario())


def test_a_session_at_e2bs_maximum_ends_with_an_answer_naming_the_cap() -> None:
    with provider("a_session_at_e2bs_maximum", folder=CASSETTES) as server:
        seen = a_session_at_e2bs_maximum(server, key())
    assert server.problems(final=True) == []
    assert seen["first"]
    data = json.loads((CASSETTES / "a_session_at_e2bs_maximum.json").read_text())
    asked = [
        i["request"]["body"]["json"]["timeout"]
        for i in data["interactions"]
        if i["request"]["path"] == "/v2/sandboxes" and i["request"]["method"] == "POST"
    ]
    assert asked[0] == 3600  # the Base plan's hour, not 7320 s, which E2B refuses with a 400
    error, took = seen["during"]
    # The cell was cut at the cap (6 s after the open), not at its 20 s or the 60 s limit, with the cap's answer.
    assert took < 15
    for refused in (error, seen["after"], seen["passed"][0]):
        assert refused.code == NO_SESSION and not refused.retryable, refused
    assert "E2B ends a sandbox 1 h from its start, sandbox.e2b.plan: base" in error.message
    assert "open a new session" in error.message and "sandbox.e2b.max_hours" in error.message
    assert "1 h from its start" in seen["passed"][0].message
    # Past the cap, the command was never sent: the one request is the kill of the session core closed.
    assert [method for method, _ in seen["passed"][1]] == ["DELETE"]


def test_the_cap_comes_from_the_plan_or_the_teams_hours() -> None:
    assert E2BConfig().max_length == 3600 and E2BConfig(plan="hobby").max_length == 3600
    assert E2BConfig(plan="pro").max_length == 24 * 3600 and E2BConfig(plan="pro", max_hours=48).max_length == 48 * 3600
    config = load_config_text("sandbox:\n  driver: e2b\n  e2b: {plan: pro}\n")
    assert config.sandbox.section("e2b", E2BConfig).max_length == 24 * 3600
    with pytest.raises(ConfigError) as caught:
        load_config_text("sandbox:\n  driver: e2b\n  e2b: {plan: gold}\n")
    assert "plan: expected one of base, hobby, pro" in str(caught.value)


def test_a_run_longer_than_the_plan_lets_a_sandbox_live_is_0001_before_anything_is_sent() -> None:
    driver = e2b_sandbox_driver(api_key=KEY, api_url="http://127.0.0.1:9", sandbox_url="http://127.0.0.1:9")
    config = load_config_text("sandbox: {driver: e2b, limits: {timeout: 2h}}\n")
    sandbox = Sandbox(SandboxDeps(config=config, driver=driver))
    with pytest.raises(SandboxError) as caught:
        sandbox.run("print(1)")
    sandbox.close()
    assert caught.value.code == INVALID_OPTION and caught.value.ran is False
    assert "limits.timeout 7200s is longer than E2B lets a sandbox run (1 h from its start" in caught.value.message


def test_a_session_taken_over_by_another_worker_keeps_the_end_its_opener_set() -> None:
    """The opener's notebook asked for 50 minutes; a worker with 1-minute sessions takes it over and writes.

    Against the stand-in (``stand_in.py``), which moves a sandbox's end as E2B's API does: ``/timeout`` to
    ``now + asked`` even when sooner (``KeepAliveFor(allowShorter=true)``, sandbox_timeout.go), ``/refreshes``
    never sooner (``allowShorter=false``, sandbox_refresh.go, keep_alive.go ``ErrCannotShortenTTL``).
    """
    limits = RunLimits(timeout=10.0, memory=0, output=0, files=1 << 20, disk=0)
    opened = BoxSpec(id="ses_00112233445566778899aabb", limits=limits, tenant="default", idle=3000.0)
    taken = BoxSpec(id=opened.id, limits=limits, tenant="default", idle=60.0)  # the taking worker's own limits
    with stand_in() as (api, url, state):
        opener = e2b_sandbox_driver(api_key=KEY, api_url=api, sandbox_url=url)
        taker = e2b_sandbox_driver(api_key=KEY, api_url=api, sandbox_url=url)

        async def scenario() -> dict[str, float]:
            box = await opener.mainsdk_driver_start(opened)
            end = state.boxes[box.sandbox_id].end
            try:
                other = await taker.mainsdk_driver_reconnect(taken)
                assert other is not None
                seen = {"known": other.expires - time.monotonic()}  # the end E2B listed, not "now"
                await taker.mainsdk_driver_write_file(box=other, folder=Folder.WORK, path="a.txt", data=b"1")
                seen["after_write"] = state.boxes[box.sandbox_id].end - end
                # Should the taker's clock know nothing of that end, its keep-alive still cannot shorten it.
                other.expires = time.monotonic()
                await taker.mainsdk_driver_write_file(box=other, folder=Folder.WORK, path="b.txt", data=b"2")
                seen["after_refresh"] = state.boxes[box.sandbox_id].end - end
                return seen
            finally:
                await opener.mainsdk_driver_stop(box)

        seen = asyncio.run(scenario())
    assert seen["known"] > 3000  # 3070 s asked at the create (idle 3000 + timeout 10 + 60)
    assert seen["after_write"] == 0  # the end was far enough: no request moved it
    assert seen["after_refresh"] >= 0  # asked for 130 s, the end stayed ~51 minutes away, never cut to 2


def test_a_plan_longer_than_the_teams_is_0001_and_its_remedy_works_when_followed() -> None:
    """``sandbox.e2b.plan: pro`` on a Base team: E2B's 400 to the create (handlers/timeout_helper.go, the team's
    MaxLengthHours, the stand-in's ``STATE.max_hours``) is a setting to fix, not an outage to retry; set as the
    message says, the same session opens."""
    limits = RunLimits(timeout=60.0, memory=0, output=0, files=1 << 20, disk=0)
    spec = BoxSpec(id="ses_aabbccddeeff001122334455", limits=limits, tenant="default", idle=7200.0)
    with stand_in() as (api, url, _state):

        async def open_with(plan: str) -> None:
            driver = e2b_sandbox_driver(api_key=KEY, api_url=api, sandbox_url=url, plan=plan)
            await driver.mainsdk_driver_stop(await driver.mainsdk_driver_start(spec))

        with pytest.raises(SandboxError) as caught:
            asyncio.run(open_with("pro"))
        error = caught.value
        assert (error.code, error.ran, error.retryable) == (INVALID_OPTION, False, False), error
        assert "Timeout cannot be greater than 1 hours" in error.message
        assert "set sandbox.e2b.plan (or sandbox.e2b.max_hours) to your team's plan" in error.message
        asyncio.run(open_with("base"))  # followed: the create asks the hour the team has, and E2B takes it
