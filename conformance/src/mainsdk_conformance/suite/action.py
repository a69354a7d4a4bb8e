"""The code-runner action for agents: the sandbox's guarantees behind a tool."""

from __future__ import annotations

from decimal import Decimal

import pytest
from mainsdk import SandboxError
from mainsdk.errors import INVALID_OPTION

from mainsdk_conformance.target import Conformance


class TestAction:
    """``sandbox.action`` runs its input as a run and returns what an agent may see."""

    def test_the_action_runs_and_returns_file_names(self, conformance: Conformance) -> None:
        built = conformance.build()
        action = built.sandbox.action(name="code.run", intent="Run Python", languages=["python"])
        out = action.run(
            {"code": "print(open('in.txt').read())\nopen('../out/r.txt', 'w').write('1')", "files": {"in.txt": "hi"}}
        )
        cost = Decimal(out.pop("cost"))
        [file] = out.pop("files")
        assert out == {
            "stdout": "hi\n",
            "stderr": "",
            "exit_code": 0,
            "signal": None,
            "stop": None,
            "files_dropped": [],
            "results": [],
        }
        assert (file["name"], file["size"], file["mime"]) == ("r.txt", 1, "text/plain")
        assert action.read(file["id"]) == b"1"
        assert cost >= 0
        [event] = built.events
        assert (event.kind, event.feature) == ("run", "code.run")

    def test_an_invalid_input_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        action = built.sandbox.action(languages=["python"])
        for bad in ({"code": ""}, {"code": "1", "language": "bash"}, {"code": "1", "shell": True}):
            with pytest.raises(SandboxError) as caught:
                action.run(bad)
            assert caught.value.code == INVALID_OPTION
        assert built.started == []
