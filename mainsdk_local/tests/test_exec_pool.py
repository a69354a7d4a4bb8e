"""The warm pool's kind "exec": boxes entered ahead whose C waits just before ``execve``. Real launcher, no mocks.

Each pitfall of a warm start has a test here, on bash, node and the Python shapes the stub
refuses: what a run sees is what the cold path shows it (the same exec run cold in the same
server, compared byte for byte), nothing of one run reaches another, the code cannot reach
the control channel, the run's own limits hold, and its time limit counts from hand-off.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping

import pytest
from mainsdk_local.launcher_client import ExecResult, ExecSpec, Launcher, LauncherBox, LauncherError
from mainsdk_local.programs import Program, resolve_program
from pool_runs import MiB, Ran, pooled_launcher, run_in_box, stats, wait_ready

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")


@pytest.fixture(scope="module")
def bash() -> Program:
    return resolve_program("bash", "bash")


@pytest.fixture(scope="module")
def node() -> Program:
    try:
        return resolve_program("node", "node")
    except Exception as exc:  # noqa: BLE001 - any reason node cannot be found is a reason to skip
        pytest.skip(f"node is not installed here: {exc}")


@pytest.fixture(scope="module")
def python() -> Program:
    return resolve_program("python", "python3")


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    yield from pooled_launcher(2)


async def run(
    launcher: Launcher,
    program: Program,
    args: tuple[str, ...],
    *,
    warm: str | None = "exec",
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    files: Mapping[str, bytes] | None = None,
    memory: int = 256 * MiB,
    timeout: float = 20.0,
    max_processes: int = 64,
    disk: int = 16 * MiB,
    session: bool = False,
) -> Ran:
    """One run in a fresh box, as the driver does it: open, write files, exec, close."""
    spec = _spec(program, args, warm=warm, env=env, stdin=stdin, memory=memory, timeout=timeout, procs=max_processes)
    return await run_in_box(launcher, spec, files=files, disk=disk, session=session)


def _spec(
    program: Program,
    args: tuple[str, ...],
    *,
    warm: str | None = "exec",
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    memory: int = 256 * MiB,
    timeout: float = 20.0,
    procs: int = 64,
) -> ExecSpec:
    return ExecSpec(
        argv=(program.executable, *args),
        env=dict(env or {}),
        timeout=timeout,
        memory_bytes=memory,
        max_processes=procs,
        stdin=stdin,
        readonly_paths=program.readonly_paths,
        hidden_paths=program.hidden_paths,
        warm=warm,  # type: ignore[arg-type]
    )


async def until_ready(launcher: Launcher, program: Program) -> None:
    """Ask for a pre-exec box of this program's root once (a run), then wait until one is ready."""
    args = ("-e", "0") if "node" in program.executable else ("-c", "0")
    await wait_ready(launcher, "exec", lambda: run(launcher, program, args), 60)


async def warm_run(launcher: Launcher, program: Program, args: tuple[str, ...], **kwargs: object) -> Ran:
    """A run on a pre-exec box (asserted): waits for one to be ready first."""
    await until_ready(launcher, program)
    ran = await run(launcher, program, args, **kwargs)  # type: ignore[arg-type]
    assert ran.result.warm_kind == "exec", f"expected a run on a pre-exec box: {ran.result}"
    return ran


def _stable(text: bytes) -> bytes:
    """What differs between any two runs, cold or warm: pipe inode numbers."""
    return re.sub(rb"pipe:\[\d+\]", b"pipe:[N]", text)


# What a bash run sees. Each is run cold and on a pre-exec box in the same server and must match byte for byte.
BASH = {
    "print": "echo hello",
    "argv and $0": 'echo "$0" "$#" "$@"; echo "$BASH_EXECUTION_STRING" | head -c 40; echo; echo "$BASH_ARGV0"',
    "cmdline": "tr '\\0' ' ' < /proc/self/cmdline; echo; tr '\\0' ' ' < /proc/$$/cmdline",
    "exit code": "exit 7",
    "error message": "nosuchcommand; echo after",
    "syntax error": "if then fi",
    "killed by a signal": "kill -SEGV $$",
    "environment": "env | sort; echo $SHLVL $PWD $OLDPWD",
    "cwd umask ids": "pwd; umask; id; ls -la --time-style=+ . | tail -n +2",
    "rlimits": "ulimit -a; cat /proc/self/limits",
    "signal dispositions": "grep Sig /proc/self/status; trap -p",
    "capabilities": "grep Cap /proc/self/status",
    "no_new_privs and seccomp": "grep -E 'NoNewPrivs|Seccomp' /proc/self/status",
    "descriptors": "ls -l --time-style=+ /proc/self/fd; ls /proc/$$/fd",
    "processes": "echo $$ $PPID /proc/[0-9]*",  # a glob, not ls: no child racing the listing
    "stdin is /dev/null": "cat; readlink /proc/self/fd/0",
    "locale": "locale 2>&1; printf '%s\\n' \"$LANG\"",
    # The host uid behind 1000 is the box slot's, different for any two boxes, cold or warm.
    "hostname and namespaces": (
        "hostname; cat /proc/sys/user/max_user_namespaces; awk '{print $1, $3}' /proc/self/uid_map"
    ),
}


@pytest.mark.parametrize("name", sorted(BASH))
async def test_a_bash_run_on_a_pre_exec_box_looks_exactly_like_a_cold_one(
    launcher: Launcher, bash: Program, name: str
) -> None:
    args = ("-c", BASH[name], "arg1", "arg 2")
    files = {"data.txt": b"the run's own file\n"}
    env = {"FOO": "bar", "LANG": "C.UTF-8"}
    cold = await run(launcher, bash, args, warm=None, files=files, env=env)
    warm = await warm_run(launcher, bash, args, files=files, env=env)
    assert not cold.result.warm
    assert (*warm.seen()[:3], _stable(warm.stdout), warm.stderr) == (
        *cold.seen()[:3],
        _stable(cold.stdout),
        cold.stderr,
    )


async def test_bash_reading_its_script_from_stdin_runs_on_a_pre_exec_box(launcher: Launcher, bash: Program) -> None:
    script = b'echo "$0" "$@"; read -r line; echo "read: $line"; cat\n'
    args = ("-s", "one", "two")
    cold = await run(launcher, bash, args, warm=None, stdin=script + b"first\nrest\n")
    warm = await warm_run(launcher, bash, args, stdin=script + b"first\nrest\n")
    assert warm.seen() == cold.seen()
    assert warm.stdout == b"/usr/bin/bash one two\nread: first\nrest\n".replace(
        b"/usr/bin/bash", bash.executable.encode()
    )


async def test_a_live_stdin_runs_on_a_pre_exec_box_and_gets_each_chunk_as_sent(
    launcher: Launcher, python: Program
) -> None:
    # The python pool declines any stdin; a pre-exec box takes the client's pipe like any stdin descriptor.
    async def chunks() -> AsyncIterator[bytes]:
        for word in (b"a\n", b"b\n"):
            yield word
            await asyncio.sleep(0.05)

    await until_ready(launcher, python)
    box = await launcher.open_box(disk_bytes=16 * MiB, session=False)
    out: list[bytes] = []
    try:
        spec = _spec(
            python, ("-c", "import sys\nfor line in sys.stdin:\n    print('got', line.strip())"), warm="python"
        )
        result = await box.exec(spec, on_stdout=out.append, on_stderr=out.append, stdin_stream=chunks())
    finally:
        await box.close()
    assert result.warm_kind == "exec" and result.exit_code == 0, result
    assert b"".join(out) == b"got a\ngot b\n"


NODE = {
    "print": "console.log(1 + 1)",
    "argv": "console.log(process.argv, process.execArgv, process.argv0, process.title)",
    "uncaught error": "function f() { throw new Error('boom') }\nf()",
    "syntax error": "console.log('unclosed'",
    "exit code": "process.exitCode = 3",
    "environment and cwd": "console.log(process.env, process.cwd(), require('fs').readdirSync('.'))",
    "cmdline": "console.log(require('fs').readFileSync('/proc/self/cmdline', 'latin1').split('\\0'))",
    "status": (
        "console.log(require('fs').readFileSync('/proc/self/status', 'latin1').split('\\n')"
        ".filter(l => /^(Sig|Cap|NoNewPrivs|Seccomp|Uid|Gid)/.test(l)).join('\\n'))"
    ),
    "descriptors": "console.log(require('fs').readdirSync('/proc/self/fd').length)",
    "signal": "process.kill(process.pid, 'SIGTERM')",
}


@pytest.mark.parametrize("name", sorted(NODE))
async def test_a_node_run_on_a_pre_exec_box_looks_exactly_like_a_cold_one(
    launcher: Launcher, node: Program, name: str
) -> None:
    args = ("-e", NODE[name], "arg1")
    files = {"data.txt": b"x"}
    cold = await run(launcher, node, args, warm=None, files=files, env={"FOO": "bar"})
    warm = await warm_run(launcher, node, args, files=files, env={"FOO": "bar"})
    assert warm.seen() == cold.seen()


async def test_python_shapes_the_stub_refuses_run_on_a_pre_exec_box(launcher: Launcher, python: Program) -> None:
    code = b"import sys, os, traceback\nprint(sys.argv, sys.orig_argv, os.getcwd())\ntraceback.print_stack()\n1/0\n"
    shapes: list[tuple[tuple[str, ...], bytes | None, dict[str, str]]] = [
        (("-E", "-s", "-", "x"), code, {}),  # code on stdin
        (("-X", "importtime", "-c", "pass"), None, {}),  # prints as it starts: per run, as cold
        (("-E", "-s", "-c", code.decode()), None, {"LC_ALL": "C"}),  # start-up variables no stub has
    ]
    for args, stdin, env in shapes:
        cold = await run(launcher, python, args, warm=None, stdin=stdin, env=env)
        warm = await run(launcher, python, args, warm="python", stdin=stdin, env=env)
        if not warm.result.warm:  # the first of a root finds none ready; then one is
            await until_ready(launcher, python)
            warm = await run(launcher, python, args, warm="python", stdin=stdin, env=env)
        assert warm.result.warm_kind == "exec", args
        if "importtime" in args:  # its timings vary run to run; its shape must not
            assert re.sub(rb"[\d ]+", b"N", warm.stderr) == re.sub(rb"[\d ]+", b"N", cold.stderr)
            assert warm.seen()[:4] == cold.seen()[:4]
        else:
            assert warm.seen() == cold.seen(), args


async def test_the_python_stub_is_preferred_to_a_pre_exec_box(launcher: Launcher, python: Program) -> None:
    args = ("-E", "-s", "-c", "print(1)")
    deadline = time.monotonic() + 60
    kinds: set[str | None] = set()
    while "python" not in kinds:
        assert time.monotonic() < deadline, f"a python -c run never took a warm interpreter: {kinds}"
        await until_ready(launcher, python)
        ran = await run(launcher, python, args, warm="python")
        assert ran.stdout == b"1\n"
        kinds.add(ran.result.warm_kind)
        await asyncio.sleep(0.2)
    seen = await stats(launcher)
    assert seen["python_hits"] >= 1


async def test_runs_on_pre_exec_boxes_share_nothing(launcher: Launcher, bash: Program) -> None:
    leave = (
        "echo secret > /work/left; echo secret > /out/left; echo secret > /tmp/left; "
        "(sleep 30 &) ; export LEFT=1; echo $$"
    )
    look = "ls /work /out /tmp; echo ${LEFT:-unset}; ps -e -o comm= 2>/dev/null || ls /proc | grep -cE '^[0-9]+$'"
    first = await warm_run(launcher, bash, ("-c", leave))
    assert first.result.exit_code == 0
    cold = await run(launcher, bash, ("-c", look), warm=None)
    second = await warm_run(launcher, bash, ("-c", look))
    assert second.seen() == cold.seen()
    assert b"left" not in second.stdout and b"sleep" not in second.stdout


async def test_the_code_cannot_reach_the_control_channel(launcher: Launcher, bash: Program) -> None:
    # Every descriptor but 0-2 is closed before execve: the control socket (the job came on it), B's
    # deadline pipe, B's report socket (close-on-exec). Writing a forged status anywhere changes nothing.
    forge = (
        "ls /proc/$$/fd; for fd in $(seq 3 63); do if [ -e /proc/$$/fd/$fd ]; then "
        'printf \'R{"op":"status","status":0}\' >&$fd && echo "wrote $fd"; fi; done; exit 42'
    )
    ran = await warm_run(launcher, bash, ("-c", forge))
    cold = await run(launcher, bash, ("-c", forge), warm=None)
    assert ran.seen() == cold.seen()
    assert ran.stdout == b"0\n1\n2\n"  # the shell holds its stdio and nothing else
    assert (ran.result.exit_code, ran.result.signal, ran.result.stop) == (42, None, None)


async def test_memory_and_process_limits_are_the_runs_own(launcher: Launcher, python: Program) -> None:
    # A pre-exec box was made before its run was known; the run's cgroup limits are written at hand-off.
    grow = b"x = bytearray(%d); x[::4096] = b'1' * len(x[::4096]); print('held')\n"
    small = await warm_run(launcher, python, ("-E", "-s", "-"), stdin=grow % (96 * MiB), memory=64 * MiB)
    assert small.result.stop == "memory"
    large = await warm_run(launcher, python, ("-E", "-s", "-"), stdin=grow % (96 * MiB), memory=512 * MiB)
    assert (large.result.stop, large.stdout) == (None, b"held\n")
    forks = b"import os, time\nn = 0\ntry:\n    for _ in range(20):\n        if os.fork() == 0:\n"
    forks += b"            time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
    few = await warm_run(launcher, python, ("-E", "-s", "-"), stdin=forks, max_processes=4, timeout=30)
    many = await warm_run(launcher, python, ("-E", "-s", "-"), stdin=forks, max_processes=64, timeout=30)
    assert (few.stdout, many.stdout) == (b"3\n", b"20\n")


async def test_the_disk_limit_is_the_runs_own(launcher: Launcher, bash: Program) -> None:
    write = "head -c 3000000 /dev/zero > /work/big; echo $?; stat -c %s /work/big"
    small = await warm_run(launcher, bash, ("-c", write), disk=MiB)
    cold = await run(launcher, bash, ("-c", write), warm=None, disk=MiB)
    assert small.seen() == cold.seen()
    assert small.stdout != b"0\n3000000\n"
    large = await warm_run(launcher, bash, ("-c", write), disk=16 * MiB)
    assert large.stdout == b"0\n3000000\n"


async def test_the_time_limit_counts_from_hand_off(launcher: Launcher, bash: Program) -> None:
    await until_ready(launcher, bash)
    await asyncio.sleep(3)  # the box has waited longer than the run's whole time limit
    ran = await run(launcher, bash, ("-c", "sleep 1; echo finished"), timeout=2.5)
    assert ran.result.warm_kind == "exec"
    assert (ran.result.stop, ran.stdout) == (None, b"finished\n")
    late = await warm_run(launcher, bash, ("-c", "sleep 30"), timeout=1.0)
    assert late.result.stop == "timeout"
    assert late.result.duration < 10


async def test_session_boxes_and_later_execs_never_take_a_pre_exec_box(launcher: Launcher, bash: Program) -> None:
    await until_ready(launcher, bash)
    session = await run(launcher, bash, ("-c", "echo 1"), session=True)
    assert not session.result.warm  # its files were written by earlier commands; its hot spare has its uid
    box = await launcher.open_box(disk_bytes=MiB, session=False)
    results: list[ExecResult] = []
    try:
        for _ in range(2):
            await until_ready(launcher, bash)
            results.append(await _exec(box, bash, ("-c", "echo 1")))
    finally:
        await box.close()
    assert [r.warm_kind for r in results] == ["exec", None]


async def test_cold_only_execs_never_take_one(launcher: Launcher, bash: Program) -> None:
    await until_ready(launcher, bash)
    ran = await run(launcher, bash, ("-c", "echo 1"), warm=None)
    assert not ran.result.warm
    assert (await stats(launcher))["exec_ready"] >= 1


async def test_all_kinds_together_are_bounded_by_the_pool_size(
    launcher: Launcher, bash: Program, python: Program
) -> None:
    runs = [run(launcher, bash, ("-c", "sleep 0.5")) for _ in range(4)]
    runs += [run(launcher, python, ("-E", "-s", "-c", "import time; time.sleep(0.5)"), warm="python") for _ in range(4)]
    await asyncio.gather(*runs)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        seen = await stats(launcher)
        assert seen["ready"] + seen["warming"] <= 2
        assert seen["ready"] == seen["exec_ready"] + seen["python_ready"]
        await asyncio.sleep(0.1)


async def _exec(box: LauncherBox, program: Program, args: tuple[str, ...]) -> ExecResult:
    return await box.exec(_spec(program, args), on_stdout=lambda chunk: None, on_stderr=lambda chunk: None)


# Through core and the driver: sandbox.run in bash and node, as an app calls it.
SANDBOX_RUNS = {
    "bash": 'echo "$0" "$#" "$PWD"; id -u; grep -E "CapEff|NoNew|Seccomp:" /proc/self/status; echo oops >&2; exit 3',
    "node": "console.log(process.argv.length, process.cwd()); console.error('oops'); process.exitCode=3",
}


async def test_sandbox_run_in_bash_and_node_takes_pre_exec_boxes_and_looks_as_it_does_cold() -> None:
    from mainsdk import AsyncSandbox, SandboxDeps

    from mainsdk_local import local_sandbox_driver

    pooled_driver = local_sandbox_driver(pool=2)
    pooled = AsyncSandbox(SandboxDeps(driver=pooled_driver, load_entrypoints=False))
    cold = AsyncSandbox(SandboxDeps(driver=local_sandbox_driver(pool=0), load_entrypoints=False))
    launcher: Launcher = pooled_driver._launcher
    try:
        if launcher.isolation != "namespace" or launcher._hello.get("pool") != 2:
            pytest.skip("the warm pool needs namespaces and memory and pids cgroups (root), which this machine lacks")
        for language, code in SANDBOX_RUNS.items():
            expected = await cold.run(code, language=language)
            assert expected.exit_code == 3 and expected.stderr == "oops\n", expected
            hits = sum(v for k, v in (await stats(launcher)).items() if k.endswith("_hits"))
            # bash has no interpreter kind: only a pre-exec box serves it; node may take the warm node or one.
            kinds = {"exec"} if language == "bash" else {"exec", "node"}
            deadline = time.monotonic() + 60
            while True:
                ran = await pooled.run(code, language=language)
                assert (ran.stdout, ran.stderr, ran.exit_code, ran.signal) == (
                    expected.stdout,
                    expected.stderr,
                    expected.exit_code,
                    expected.signal,
                ), language
                seen = await stats(launcher)
                if sum(v for k, v in seen.items() if k.endswith("_hits")) > hits:
                    assert any(seen[f"{kind}_hits"] for kind in kinds), seen
                    break
                assert time.monotonic() < deadline, f"sandbox.run {language} never ran on a pool entry: {seen}"
                await asyncio.sleep(0.3)
        assert (await stats(launcher))["exec_hits"] >= 1
    finally:
        await pooled.aclose()
        await cold.aclose()


async def test_a_run_with_hosts_gets_its_proxy_listener_on_a_pre_exec_box(launcher: Launcher, bash: Program) -> None:
    # The proxy's port is bound by the entry's own B before anything runs in its network namespace; the run
    # that takes the entry gets that listener (the warm node refuses runs with hosts: they come here).
    code = 'exec 3<>/dev/tcp/127.0.0.1/3128; echo ping >&3; read -r line <&3; echo "$line"'

    def serve(listener: socket.socket) -> None:
        def answer() -> None:
            with listener, listener.accept()[0] as conn:
                conn.recv(16)
                conn.sendall(b"pong\n")

        threading.Thread(target=answer, daemon=True).start()

    async def through_proxy(warm: str | None) -> tuple[ExecResult, bytes]:
        box = await launcher.open_box(disk_bytes=MiB, session=False)
        out: list[bytes] = []
        try:
            result = await box.exec(
                _proxied(bash, code, warm), on_stdout=out.append, on_stderr=out.append, on_listener=serve
            )
        finally:
            await box.close()
        return result, b"".join(out)

    cold = await through_proxy(None)
    await until_ready(launcher, bash)
    warm = await through_proxy("exec")
    assert warm[0].warm_kind == "exec"
    assert (warm[1], warm[0].exit_code) == (cold[1], cold[0].exit_code) == (b"pong\n", 0)


def _proxied(program: Program, code: str, warm: str | None) -> ExecSpec:
    return ExecSpec(
        argv=(program.executable, "-c", code),
        env={},
        timeout=20.0,
        memory_bytes=256 * MiB,
        readonly_paths=program.readonly_paths,
        hidden_paths=program.hidden_paths,
        proxy=True,
        warm=warm,  # type: ignore[arg-type]
    )


async def test_a_large_job_and_a_missing_program_end_as_they_do_cold(launcher: Launcher, bash: Program) -> None:
    # About 820 KB of argv and environment: the job is many socket buffers long, and C reads all of it.
    code = "echo ${#X} ${#V599}; : " + "x" * 120_000 + "; echo done"
    env = {f"V{i}": "y" * 1000 for i in range(600)} | {"X": "z" * 100_000}
    cold = await run(launcher, bash, ("-c", code), warm=None, env=env)
    warm = await warm_run(launcher, bash, ("-c", code), env=env)
    assert warm.seen() == cold.seen()
    assert warm.stdout == b"100000 1000\ndone\n"
    # A program that is not there: execve fails in C, before anything ran, on both paths alike.
    missing = Program(name="bash", executable="/usr/bin/no-such-program")
    with pytest.raises(LauncherError) as cold_error:
        await run(launcher, missing, ("-c", "true"), warm=None)
    await until_ready(launcher, bash)
    with pytest.raises(LauncherError) as warm_error:
        await run(launcher, missing, ("-c", "true"))
    assert (await stats(launcher))["exec_hits"] >= 2  # the second one was handed to a pre-exec box
    assert str(warm_error.value) == str(cold_error.value)
    assert warm_error.value.ran is cold_error.value.ran is False
