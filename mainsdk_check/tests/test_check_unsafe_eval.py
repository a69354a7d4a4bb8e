"""MAIN-SANDBOX-0010 beyond the corpus: messages, columns, silencing, and the scope rules of alias tracking."""

from __future__ import annotations

import textwrap

import pytest
from mainsdk.errors import UNSAFE_EVAL
from mainsdk_check.unsafe_eval import allowed_codes

from mainsdk_check import Finding, find_unsafe_eval


def lines(source: str) -> list[int]:
    return [f.line for f in find_unsafe_eval(textwrap.dedent(source), "t.py")]


def test_a_finding_names_the_file_line_column_call_and_fix() -> None:
    [finding] = find_unsafe_eval("import subprocess as sp\n\n\nsp.run(cmd, shell=True)\n", "app/tasks.py")
    assert finding == Finding(
        code=UNSAFE_EVAL,
        path="app/tasks.py",
        line=4,
        column=1,
        message="`sp.run(...)` (subprocess.run) with shell=True runs a command that is not a string literal",
        fix='run it with sandbox.run (language "bash") instead, or pass a list of arguments without shell=True',
        silenced=False,
    )


def test_the_fix_for_code_is_sandbox_run() -> None:
    [finding] = find_unsafe_eval("x = eval(text)\n", "t.py")
    assert "sandbox.run" in finding.fix
    assert finding.message.startswith("`eval(...)`")


def test_column_counts_characters_not_bytes() -> None:
    [finding] = find_unsafe_eval('é = "ü"; eval(é)\n', "t.py")
    assert finding.column == len('é = "ü"; ') + 1


def test_findings_are_in_file_order() -> None:
    source = "exec(b)\neval(a); exec(c)\n"
    assert [(f.line, f.column) for f in find_unsafe_eval(source, "t.py")] == [(1, 1), (2, 1), (2, 10)]


def test_a_nested_call_reports_both_calls() -> None:
    assert lines("exec(eval(x))\n") == [1, 1]


def test_an_allow_comment_silences_only_its_line_and_its_code() -> None:
    source = textwrap.dedent(
        """\
        eval(a)  # mainsdk: allow MAIN-SANDBOX-0010
        eval(b)
        eval(c)  # mainsdk: allow MAIN-SANDBOX-0012
        eval(d)  # noqa: S307  # mainsdk: allow MAIN-SANDBOX-0012, MAIN-SANDBOX-0010 trusted template
        """
    )
    assert [(f.line, f.silenced) for f in find_unsafe_eval(source, "t.py")] == [
        (1, True),
        (2, False),
        (3, False),
        (4, True),
    ]


def test_allow_text_in_a_string_is_not_a_comment() -> None:
    source = 'eval(a); note = "# mainsdk: allow MAIN-SANDBOX-0010"\n'
    [finding] = find_unsafe_eval(source, "t.py")
    assert not finding.silenced
    assert allowed_codes(source) == {}


def test_an_allow_comment_needs_a_code() -> None:
    assert allowed_codes("eval(a)  # mainsdk: allow\n") == {}


def test_a_syntax_error_is_raised() -> None:
    with pytest.raises(SyntaxError):
        find_unsafe_eval("def broken(:\n", "t.py")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # A class body runs at once and sees its own names...
        ("class A:\n    run = exec\n    run(x)\n", [3]),
        # ...but its methods do not: `run` there is a global (here unbound, so nothing).
        ("class A:\n    run = exec\n    def go(self):\n        run(x)\n", []),
        # `del` of a module-level shadow brings the builtin back.
        ("eval = print\neval(x)\ndel eval\neval(x)\n", [4]),
        # A local function named eval shadows the builtin in the whole module.
        ("def f(x):\n    return eval(x)\ndef eval(x):\n    return x\n", []),
        # Star imports of a sink module bring the sinks in.
        ("from subprocess import *\nrun(cmd, shell=True)\n", [2]),
        ("from os import *\nsystem(cmd)\n", [2]),
        # shell passed by position (Popen's ninth parameter).
        ("import subprocess\nsubprocess.Popen(cmd, -1, None, None, None, None, None, True, True)\n", [2]),
        # shell hidden in **options is not visible: not reported.
        ("import subprocess\nsubprocess.run(cmd, **options)\n", []),
        ("import subprocess\nsubprocess.run(cmd, shell=False)\n", []),
        ("import subprocess\nsubprocess.run(cmd, shell=None)\n", []),
        # A parameter named like a sink is whatever the caller passes: unknown...
        ("def apply(eval, x):\n    return eval(x)\n", []),
        # ...unless its default is a sink.
        ("def apply(x, *, run=exec):\n    return run(x)\n", [2]),
        ("def apply(x, run=print):\n    return run(x)\n", []),
        # A tuple assignment pairs up.
        ("a, b = print, exec\na(x)\nb(x)\n", [3]),
        # A loop that rebinds a name on a later iteration.
        ("run = print\nfor item in items:\n    run(item)\n    run = exec\n", [3]),
        # An except handler may start from any point of the try body.
        ("run = exec\ntry:\n    run = print\n    risky()\nexcept Exception:\n    run(x)\n", [6]),
        # ...including the middle of it.
        ("run = print\ntry:\n    run = exec\n    risky()\n    run = print\nexcept Exception:\n    run(x)\n", [7]),
        # A try body that rebinds, with an else branch.
        ("try:\n    from builtins import eval as e\nexcept ImportError:\n    e = print\nelse:\n    pass\ne(x)\n", [7]),
        # A walrus in a comprehension binds in the enclosing scope.
        ("[(f := exec) for _ in range(1)]\nf(x)\n", [2]),
        # A lambda default is evaluated in the enclosing scope.
        ("f = lambda run=exec: run(code)\n", [1]),
        # A decorator's arguments are checked, the decorated function is not a sink.
        ("@register(eval(spec))\ndef eval():\n    pass\n", [1]),
        # A call result is not the function.
        ("run = exec(x)\nrun(y)\n", [1]),
        # Reading a module through importlib and __import__.
        ("import importlib\nimportlib.import_module('os').system(cmd)\n", [2]),
        ("__import__('subprocess').getoutput(cmd)\n", [1]),
        # builtins.__dict__ is another door to eval.
        ("import builtins\nbuiltins.__dict__['eval'](x)\n", [2]),
        # The argument list of a shell must be all literals.
        ("import subprocess\nsubprocess.run(['ls', folder], shell=True)\n", [2]),
        ("import subprocess\nsubprocess.run(('ls', '-l'), shell=True)\n", []),
        # str methods on a literal stay literal; with a computed argument they do not.
        ("exec('x = {}'.format(1))\n", []),
        ("exec('x = {}'.format(y))\n", [1]),
        # Keyword-only source for the code interpreter.
        ("import code\ncode.InteractiveInterpreter().runcode(code=obj)\n", [2]),
        # An async function body.
        ("import asyncio\nasync def go(c):\n    await asyncio.create_subprocess_shell(c)\n", [3]),
        # A call with no argument runs nothing.
        ("eval()\n", []),
        # A match capture shadows the builtin.
        ("match spec:\n    case eval:\n        eval(x)\n", []),
    ],
)
def test_scope_rules(source: str, expected: list[int]) -> None:
    assert lines(source) == expected
