"""The command stream's faults, live: sandboxd's gRPC stream cut mid-run, and a stream that never answers.

The conformance suite's two command-stream fault tests need a recorded stream, which a cassette cannot hold for a
gRPC one (conformance/conftest.py lists them as expected failures): these are the same checks, on the stand-in.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import mainsdk
import pytest
from mainsdk_kubernetes._proto import process_pb2 as pb
from standin_cluster import make_sandbox
from standin_pods import FAULTY

GRACE = 5.0  # core's backstop past the time limit (the suite's DEADLINE_GRACE)


def _archive(command: list[str]) -> bool:
    return "tar -cf - ." in " ".join(command)


def _commands(starts: list[list[str]]) -> list[list[str]]:
    """The Starts that ran the code (not the out folder's archive)."""
    return [c for c in starts if not _archive(c)]


def test_a_stream_cut_mid_run_is_0006_may_have_run_and_the_command_is_not_sent_again(
    cluster: Any, tmp_path: Path
) -> None:
    c = cluster()

    def cut(command: list[str], context: grpc.ServicerContext) -> Iterator[pb.StartResponse]:
        yield pb.StartResponse(init=pb.InitEvent(process_id=FAULTY))
        yield pb.StartResponse(stdout=b"fau")
        context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset")

    c.pods.fault = cut
    c.pods.fault_for = lambda command: not _archive(command)
    with pytest.raises(mainsdk.SandboxError) as caught:
        make_sandbox(c, tmp_path).run("print('fault')")
    error = caught.value
    assert (error.code, error.ran, error.retryable) == ("MAIN-SANDBOX-0006", None, False), error
    assert "not retryable" in error.message
    assert len(_commands(c.pods.starts)) == 1
    assert c.api.claims == {}  # the claim deleted all the same


def test_a_stream_that_never_answers_stops_at_the_time_limit_and_is_killed_once(cluster: Any, tmp_path: Path) -> None:
    c = cluster()

    def hold(command: list[str], context: grpc.ServicerContext) -> Iterator[pb.StartResponse]:
        yield pb.StartResponse(init=pb.InitEvent(process_id=FAULTY))
        while context.is_active():
            time.sleep(0.05)

    c.pods.fault = hold
    c.pods.fault_for = lambda command: not _archive(command)
    began = time.monotonic()
    result = make_sandbox(c, tmp_path).run("print('fault')", limits={"timeout": "1s"})
    assert (result.stop, result.exit_code) == ("timeout", None)
    assert time.monotonic() - began < 1 + GRACE + 3  # the claim's setup and delete on top
    assert len(_commands(c.pods.starts)) == 1
    assert c.pods.signals[:1] == [pb.SIGNAL_SIGKILL]
