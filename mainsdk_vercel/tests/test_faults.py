"""The driver's own fault cassettes (``tests/cassettes``), replayed with the real driver and a real httpx client.

Each is derived by ``tests/conformance/author.py`` from the authored plain run
of ``print('fault')``, with the fault written as Vercel's clients read it
(``meta.edited`` names it). Replay is
strict: a request the cassette lacks (a command sent twice, a stop sent to a
sandbox that is gone) fails the test, and so does a recorded one that never came.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import DRIVER_UNAVAILABLE
from mainsdk_conformance.profiles import VERCEL
from mainsdk_conformance.replay import ReplayServer

from mainsdk_vercel import vercel_sandbox_driver

CASSETTES = Path(__file__).parent / "cassettes"
PROJECT = "prj_conformance"
TEAM = "team_conformance"
# Shaped like a Vercel personal token, so that finding it anywhere is meaningful; made up, never a real one.
TOKEN = "vcp_" + "replayFAKEtoken" + "7" * 17
CODE = "print('fault')"
# The config the plain run was recorded with: its 10 s limit makes the create's timeout (10 s + 60 s margin).
CONFIG = "sandbox: {driver: vercel-sandbox, limits: {timeout: 10s}}\n"


def assert_no_token(error: BaseException) -> None:
    """The token is in no text of the error: message, str, repr, arguments, nor any error it came from."""
    seen: BaseException | None = error
    while seen is not None:
        texts = [str(seen), repr(seen), *map(str, seen.args), str(getattr(seen, "message", ""))]
        assert not [t for t in texts if TOKEN in t or TOKEN[:12] in t], f"the token is in {type(seen).__name__}"
        seen = seen.__cause__ or seen.__context__


class Replayed:
    """A replay server on one cassette, and a sandbox on the driver pointed at it."""

    def __init__(self, name: str) -> None:
        self.server = ReplayServer.replayer(VERCEL, CASSETTES / name)
        self.server.start()
        driver = vercel_sandbox_driver(token=TOKEN, project=PROJECT, team=TEAM, base_url=self.server.url("api"))
        self.sandbox = Sandbox(SandboxDeps(config=load_config_text(CONFIG), driver=driver, load_entrypoints=False))

    def outage(self) -> SandboxError:
        """Run the code, expecting MAIN-SANDBOX-0006 (503), retryable only if the command was never sent."""
        with pytest.raises(SandboxError) as caught:
            self.sandbox.run(CODE)
        error = caught.value
        assert_no_token(error)
        sent = self.server.commands_sent() > 0
        assert (error.code, error.status, error.retryable) == (DRIVER_UNAVAILABLE, 503, not sent), error
        assert error.ran is (None if sent else False), error
        return error

    def close(self) -> list[str]:
        self.sandbox.close()
        self.server.stop()
        return self.server.problems(final=True)


@pytest.fixture
def replayed() -> Iterator[list[Replayed]]:
    opened: list[Replayed] = []
    yield opened
    problems = [p for r in opened for p in r.close()]
    assert problems == [], "\n".join(problems)


def replay(opened: list[Replayed], name: str) -> Replayed:
    r = Replayed(name)
    opened.append(r)
    return r


@pytest.mark.parametrize(
    ("name", "status", "says"),
    [
        ("create_401.json", 401, "the token was refused; check the token"),
        ("create_402.json", 402, "billing"),
        ("create_403.json", 403, "may not use this project or team"),
        # Vercel's usual answer to a bad token is a 403 with invalidToken: it says to check the token.
        ("create_403_invalid_token.json", 403, "the token is not valid"),
    ],
)
def test_a_refused_create_is_0006_naming_vercels_status_and_why(
    replayed: list[Replayed], name: str, status: int, says: str
) -> None:
    r = replay(replayed, name)
    error = r.outage()
    assert f"create failed with {status}" in error.message and says in error.message
    assert r.server.commands_sent() == 0


def test_a_sandbox_stopped_mid_run_is_0006_and_gets_no_more_requests(replayed: list[Replayed]) -> None:
    # 410 on the command: the session stopped under the run. Known stopped, so no kill and no stop follow
    # (strict replay would refuse them).
    r = replay(replayed, "stopped_mid_run.json")
    error = r.outage()
    assert "410" in error.message and "sandbox_stopped" in error.message
    assert r.server.commands_sent() == 1
    assert not [x for x in r.server.received if x.path.endswith("/stop")]


def test_a_command_level_404_still_stops_the_sandbox(replayed: list[Replayed]) -> None:
    # The stream broke; following it, the logs and the kill answer 404 command_not_found. A 404 is no proof
    # that the sandbox stopped (only a 410, or a 422 sandbox_stopping, is), so the driver still stops it:
    # never a sandbox left billed until its own timeout.
    r = replay(replayed, "command_404_still_stops.json")
    error = r.outage()
    assert "404" in error.message and "command_not_found" in error.message
    assert [x.path.rsplit("/", 1)[-1] for x in r.server.received][-2:] == ["kill", "stop"]
    assert r.server.commands_sent() == 1


def test_a_cut_stream_is_followed_without_repeating_output_or_the_command(replayed: list[Replayed]) -> None:
    # The command's stream breaks after "fa"; the driver follows the command by its logs (Vercel replays them
    # from the start: "fa", "ult\n", and "fa" is skipped) and its wait. The command is not sent again.
    r = replay(replayed, "cut_log_stream.json")
    assert r.server.cassette.has_fault("reset")
    result = r.sandbox.run(CODE)
    assert (result.stdout, result.exit_code) == ("fault\n", 0)
    assert [x.path for x in r.server.received if x.path.endswith("/logs")] != []
    assert r.server.commands_sent() == 1


def test_429_with_a_retry_after_past_10_s_is_0006_at_once_and_create_is_sent_once(replayed: list[Replayed]) -> None:
    r = replay(replayed, "create_429_retry_after_120.json")
    started = time.monotonic()
    error = r.outage()
    assert time.monotonic() - started < 5
    assert "429" in error.message and "rate limit" in error.message
    assert [x.path for x in r.server.received] == ["/v3/sandboxes"]


def test_429_on_the_command_is_sent_again_after_retry_after(replayed: list[Replayed]) -> None:
    # A 429 is a refusal before acting: even a command is safe to send again, after the wait.
    r = replay(replayed, "cmd_429_retry_after_1.json")
    assert r.server.cassette.has_status(429, header="retry-after")
    assert r.sandbox.run(CODE).stdout == "fault\n"
    assert r.server.retry_after_violations() == []


def test_503_on_the_command_is_0006_the_command_is_not_sent_again_and_the_sandbox_stops(
    replayed: list[Replayed],
) -> None:
    r = replay(replayed, "cmd_503.json")
    error = r.outage()
    assert "cmd failed with 503" in error.message
    assert r.server.commands_sent() == 1
    assert r.server.received[-1].path.endswith("/stop")


def test_503_on_the_wait_is_retried_since_reading_is_idempotent(replayed: list[Replayed]) -> None:
    r = replay(replayed, "wait_503_then_ok.json")
    assert r.server.cassette.has_status(503)
    result = r.sandbox.run(CODE)
    assert (result.stdout, result.exit_code) == ("fault\n", 0)
    assert r.server.commands_sent() == 1  # the code once; the out archive was made by it


@pytest.mark.parametrize(
    "name",
    [
        "create_401.json",
        "create_402.json",
        "create_403.json",
        "create_403_invalid_token.json",
        "create_429_retry_after_120.json",
        "stopped_mid_run.json",
        "command_404_still_stops.json",
        "cmd_503.json",
    ],
)
def test_no_error_text_holds_the_token(replayed: list[Replayed], name: str) -> None:
    # outage() checks every SandboxError for the token; this runs it on every fault that raises one.
    replay(replayed, name).outage()
