"""A cell's own env is checked as a run's (issue 31): a name with a final newline, an empty secret, refused first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mainsdk import SandboxError, secret
from mainsdk.errors import INVALID_OPTION, SECRET_NOT_ALLOWED


def test_a_cells_env_name_with_a_newline_and_an_empty_secret_are_refused_and_the_session_goes_on(
    make_sandbox: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Must hold: `^...$` with re.match let "A\n" by as a variable name; an empty secret was a value for a cell's env,
    # though egress refused it. Both are the caller's mistake, said before the cell runs; the interpreter lives on.
    monkeypatch.setenv("TEST_API_KEY", "")
    with make_sandbox().sandbox.create() as session:
        assert session.run_code("x = 1").ok
        with pytest.raises(SandboxError) as named:
            session.run_code("x = 2", env={"A\n": "x"})
        assert named.value.code == INVALID_OPTION and repr("A\n") in named.value.message
        with pytest.raises(SandboxError) as empty:
            session.run_code("x = 3", env={"KEY": secret("TEST_API_KEY")})
        assert empty.value.code == SECRET_NOT_ALLOWED and "TEST_API_KEY" in empty.value.message
        assert "empty" in empty.value.message and "env.KEY" in empty.value.message
        assert session.run_code("x").text == "1"  # neither cell ran
