"""Round trips per run, counted from the cassettes (the figure README.md states)."""

from __future__ import annotations

from pathlib import Path

from mainsdk_conformance.cassette import load

CASSETTES = Path(__file__).parent / "conformance" / "cassettes"
# README.md, "Round trips per run": a run is 4 requests (create, the command with its output, the out archive,
# stop), plus 1 with files in, plus 1 read of the sandbox for each time the create (or a read) answered that it
# is still booting (``pending``): the stand-in the cassettes were authored on answers the create so, once.
# The ceiling is 6 (+1 with files in).
PLAIN_RUN = 4
BOOTING = 1
FILES_IN = 1


def _steps(name: str) -> list[str]:
    steps = []
    for interaction in load(CASSETTES / name).interactions:
        request = interaction["request"]
        booting = request["method"] == "GET" and request["path"].count("/") == 3  # GET /v2/sandboxes/{name}
        steps.append("GET sandbox" if booting else f"{request['method']} {request['path'].rsplit('/', 1)[-1]}")
    return steps


def test_a_run_is_four_requests() -> None:
    steps = _steps("TestRun/test_python_prints.json")
    assert steps == ["POST sandboxes", "GET sandbox", "POST cmd", "POST read", "POST stop"]
    assert len(steps) == PLAIN_RUN + BOOTING <= 6


def test_files_in_add_one_request_and_out_files_none() -> None:
    # A file in (one write), the out files back in one read, however many.
    steps = _steps("TestFiles/test_out_files_come_back_as_file_refs.json")
    assert steps == ["POST sandboxes", "GET sandbox", "POST write", "POST cmd", "POST read", "POST stop"]
    assert len(steps) == PLAIN_RUN + BOOTING + FILES_IN <= 7


def test_every_plain_run_costs_the_stated_figure() -> None:
    # Every one-shot run of TestRun, TestIsolation and TestFiles that ran to its end: 4, or 5 with a write.
    for folder in ("TestRun", "TestIsolation", "TestFiles"):
        for path in sorted((CASSETTES / folder).glob("*.json")):
            steps = _steps(f"{folder}/{path.name}")
            if not steps:
                continue  # refused before any request, or live only
            writes = steps.count("POST write")
            booting = steps.count("GET sandbox")
            assert len(steps) == PLAIN_RUN + booting + writes and writes <= 1 and booting <= BOOTING, (path.name, steps)


def test_a_cell_in_a_warm_session_is_one_request() -> None:
    # The session's first cell gives the box the kernel's IPython set: the image's python probed, the wheels
    # written, one offline install. The interpreter is then one command with a live stdin (attachStdin) whose stream
    # stays open; its token and start line are the first write to that stdin, and each cell is one more write (its
    # request line), answered on the command's stream. Closing kills the interpreter, then stops.
    steps = _steps("TestCells/test_state_stays_across_cells.json")
    assert steps == [
        "POST sandboxes",
        "GET sandbox",  # until it runs
        "POST cmd",  # the probe of the image's python
        "POST write",  # the kernel set's wheels
        "POST cmd",  # their offline install into /opt/mainsdk/kernel
        "POST cmd",  # the kernel
        "POST stdin",  # its token and start line
        "POST stdin",  # cell 1
        "POST stdin",  # cell 2
        "POST kill",
        "POST stop",
    ]


def test_a_background_process_is_one_command_and_its_kill() -> None:
    steps = _steps("TestBackground/test_output_so_far_wait_and_kill.json")
    assert steps == ["POST sandboxes", "GET sandbox", "POST cmd", "POST cmd", "POST kill", "POST stop"]
