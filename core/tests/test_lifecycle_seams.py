"""The one stop reason (``mainsdk.lifecycle.stop_reason``), and sessions reaching the box only through the lifecycle."""

from __future__ import annotations

import ast
from pathlib import Path

import mainsdk
import pytest
from mainsdk.driver import StopReason
from mainsdk.lifecycle import Ending, stop_reason

CASES: list[tuple[Ending, StopReason | None]] = [
    (Ending(), None),
    (Ending(driver_stop="timeout"), "timeout"),
    (Ending(driver_stop="memory"), "memory"),
    (Ending(output_cut=True), "output"),
    (Ending(timed_out=True), "timeout"),
    (Ending(files_cut=True), "output"),
    # What the driver saw comes first: it killed the code at that limit, whatever core cut afterwards.
    (Ending(driver_stop="memory", output_cut=True, files_cut=True), "memory"),
    (Ending(driver_stop="timeout", output_cut=True), "timeout"),
    # Core cut the output, so the command was cancelled before its deadline: the output is why.
    (Ending(output_cut=True, timed_out=True), "output"),
    (Ending(timed_out=True, files_cut=True), "timeout"),
    # A time limit the cost ceiling set makes a timeout the cost's, and nothing else.
    (Ending(driver_stop="timeout", cost_bound=True), "cost"),
    (Ending(timed_out=True, cost_bound=True), "cost"),
    (Ending(driver_stop="memory", cost_bound=True), "memory"),
    (Ending(output_cut=True, cost_bound=True), "output"),
    (Ending(cost_bound=True), None),
]


@pytest.mark.parametrize(("ending", "expected"), CASES, ids=[repr(c[0]) for c in CASES])
def test_the_stop_reason_is_decided_from_the_facts_of_an_ending(ending: Ending, expected: StopReason | None) -> None:
    assert stop_reason(ending) == expected


SOURCE = Path(mainsdk.__file__).parent


@pytest.mark.parametrize("module", ["sessions.py", "session_runtime.py", "cells.py", "background.py"])
def test_sessions_cells_and_background_processes_never_reach_into_the_sandbox(module: str) -> None:
    # Before: AsyncSession called the sandbox's _driver_call, _audit, _sessions and _stop_box, and cells its
    # _store and hooks. Now they hold the lifecycle (``session.lifecycle``) and the session's open box.
    tree = ast.parse((SOURCE / module).read_text())
    names = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert not names & {"_sandbox", "AsyncSandbox", "hooks", "_driver_call", "_stop_box", "_audit", "_store"}


def test_a_refusal_is_audited_in_one_place() -> None:
    # Every refusal is raised by a planner and audited by Lifecycle.plan, once: no other module writes one.
    writers = []
    for path in sorted(SOURCE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            kind = node.value if isinstance(node, ast.keyword) and node.arg == "kind" else None
            if isinstance(kind, ast.Constant) and kind.value == "refused":
                writers.append(path.name)
    assert set(writers) == {"lifecycle.py"}
