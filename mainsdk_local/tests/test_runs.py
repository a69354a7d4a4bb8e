"""A run runs the code and returns what it did: python, node and bash, exit codes and stderr, long code, threads."""

from __future__ import annotations

from mainsdk import Sandbox


def test_a_snippet_runs_and_prints(sandbox: Sandbox) -> None:
    result = sandbox.run("print(1 + 1)", "python", feature="notebook")
    assert (result.stdout, result.stderr, result.exit_code, result.stop) == ("2\n", "", 0, None)
    assert result.isolation == "namespace" and result.driver == "local"
    assert result.duration > 0 and result.id.startswith("run_")


def test_node_and_bash_run_too(sandbox: Sandbox) -> None:
    assert sandbox.run("console.log(6 * 7)", "node").stdout == "42\n"
    assert sandbox.run("echo $((6 * 7)); exit 3", "bash").exit_code == 3


def test_the_exit_code_and_stderr_come_back(sandbox: Sandbox) -> None:
    result = sandbox.run("import sys; print('oops', file=sys.stderr); sys.exit(4)")
    assert (result.exit_code, result.stderr, result.stop) == (4, "oops\n", None)


def test_long_code_goes_through_stdin(sandbox: Sandbox) -> None:
    # The code is not in argv (the figures wrapper, a few KB, is): "x = 1" appears only in the code itself.
    code = "x = 1\n" * 30000 + "print(x, ('x = ' + '1') not in open('/proc/self/cmdline').read())"
    assert sandbox.run(code).stdout == "1 True\n"


def test_runs_in_parallel_threads_do_not_mix(sandbox: Sandbox) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: sandbox.run(f"print({i} * 2)").stdout, range(8)))
    assert outs == [f"{i * 2}\n" for i in range(8)]
