"""Every public call on the real local driver: a wrong argument is MAIN-SANDBOX-0001 naming it and nothing starts;
MAIN-SANDBOX-0006 only for an outage, retryable only when nothing ran; a session outlives no launcher."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mainsdk import (
    AsyncSandbox,
    Sandbox,
    SandboxDeps,
    SandboxError,
    create_sandbox,
    errors,
    load_config,
    parse_sandbox_config,
)
from mainsdk.audit import AuditEvent
from mainsdk.config import load_config_text
from mainsdk.files import LocalDirectoryFileStore
from mainsdk_local.driver import LocalDriver

from mainsdk_local import local_sandbox_driver

CONFIG = """
sandbox:
  driver: local
  limits: { timeout: 10s, memory: 256MB, output: 1MB }
permissions:
  processes: [python3, bash]
  disk: { temp: { max: 64MB } }
"""


class Built:
    def __init__(self, sandbox: Sandbox, events: list[AuditEvent], driver: LocalDriver) -> None:
        self.sandbox, self.events, self.driver = sandbox, events, driver


@pytest.fixture
def build() -> Iterator[Callable[..., Built]]:
    made: list[Sandbox] = []

    def make(text: str = CONFIG) -> Built:
        config = load_config_text(text)
        events: list[AuditEvent] = []
        driver = local_sandbox_driver(permissions=config.permissions)
        sandbox = Sandbox(SandboxDeps(config=config, driver=driver, log=events.append, load_entrypoints=False))
        made.append(sandbox)
        return Built(sandbox, events, driver)

    yield make
    for sandbox in made:
        sandbox.close()


def refused(built: Built, call: Callable[[], object], argument: str) -> SandboxError:
    """The call is 0001 naming ``argument``, not retryable, nothing ran, and it is audited as refused."""
    before = len(built.events)
    with pytest.raises(SandboxError) as caught:
        call()
    error = caught.value
    assert (error.code, error.retryable, error.ran) == (errors.INVALID_OPTION, False, False), error
    assert argument in error.message, error.message
    assert [(e.kind, e.error) for e in built.events[before:]] in ([], [("refused", errors.INVALID_OPTION)])
    return error


RUN_MISTAKES: list[tuple[str, dict[str, Any], str]] = [
    ("files list", {"files": ["a.txt"]}, "files"),
    ("env list", {"env": ["A=1"]}, "env"),
    ("limits str", {"limits": "1s"}, "limits"),
    ("on_output int", {"on_output": 1}, "on_output"),
    ("files None", {"files": {"a": None}}, "files['a']"),
    ("files int", {"files": {"a": 5}}, "files['a']: must be str or bytes, not int"),
    ("files Path", {"files": {"a": pathlib.Path("/etc/hostname")}}, "files['a']: is a path (PosixPath)"),
    ("file and folder", {"files": {"a": "x", "a/b": "y"}}, "'a' is a file and also the folder of 'a/b'"),
    ("memory under the minimum", {"limits": {"memory": "100KB"}}, "limits.memory 100KB is below the 4MB"),
    ("huge timeout", {"limits": {"timeout": 10**400}}, "limits.timeout"),
    ("env surrogate", {"env": {"A": "\udc80"}}, "env.A"),
    ("feature int", {"feature": 5}, "feature"),
]


@pytest.mark.parametrize(("options", "argument"), [m[1:] for m in RUN_MISTAKES], ids=[m[0] for m in RUN_MISTAKES])
def test_a_wrong_run_argument_is_0001_naming_it_and_nothing_starts(
    build: Callable[..., Built], options: dict[str, Any], argument: str
) -> None:
    built = build()
    refused(built, lambda: built.sandbox.run("open('../out/x', 'w').write('ran')", **options), argument)
    assert [e.kind for e in built.events] == ["refused"]


def test_code_with_a_nul_byte_or_a_surrogate_is_0001_not_an_outage(build: Callable[..., Built]) -> None:
    built = build()
    refused(built, lambda: built.sandbox.run("print(1)\0"), "code: holds a NUL byte")
    refused(built, lambda: built.sandbox.run("print('\udc80')"), "code: holds '\\udc80'")


def test_a_disk_too_small_to_start_is_0001(build: Callable[..., Built]) -> None:
    built = build(CONFIG.replace("max: 64MB", "max: 1KB"))
    refused(built, lambda: built.sandbox.run("print(1)"), "permissions.disk.temp.max 1KB is below")
    small = build(CONFIG.replace("max: 64MB", "max: 8KB"))
    files = {"a": "1", "b": "2", "c": "3"}  # three pages on a two-page tmpfs
    refused(small, lambda: small.sandbox.run("print(1)", files=files), "permissions.disk.temp.max 8KB")


def test_files_take_str_and_bytes_exactly(build: Callable[..., Built]) -> None:
    built = build()
    code = "import hashlib; print(open('t','rb').read().hex(), open('d/b','rb').read().hex())"
    result = built.sandbox.run(code, files={"t": "é", "d/b": b"\0\xff"})
    assert result.stdout == "c3a9 00ff\n"


def test_session_and_file_arguments_are_0001_naming_them(build: Callable[..., Built]) -> None:
    built = build()
    refused(built, lambda: built.sandbox.files.read(None), "ref")  # type: ignore[arg-type]
    refused(built, lambda: built.sandbox.create(files=["a"]), "files")
    refused(built, lambda: built.sandbox.create(idle=float("nan")), "idle")
    with built.sandbox.create() as session:
        refused(built, lambda: session.write("a", None), "data")  # type: ignore[arg-type]
        refused(built, lambda: session.write("a", 5), "data: must be str or bytes, not int")  # type: ignore[arg-type]
        refused(built, lambda: session.write("../a", "x"), "path")
        refused(built, lambda: session.read(None), "path")  # type: ignore[arg-type]
        refused(built, lambda: session.run("python3", None), "args")  # type: ignore[arg-type]
        refused(built, lambda: session.run("python3", ["-c", "1\0"]), "args[1]")
        refused(built, lambda: session.run("python3", ["-c", "1"], on_output=1), "on_output")  # type: ignore[arg-type]
        assert session.run("python3", ["-c", "print(2)"]).stdout == "2\n"  # and the session still works


def test_an_unlisted_program_is_refused_before_any_box_starts(build: Callable[..., Built]) -> None:
    built = build(CONFIG.replace("processes: [python3, bash]", "processes: [bash]"))
    refused(built, lambda: built.sandbox.run("print(1)"), "permissions.processes")
    assert [(e.kind, e.error) for e in built.events] == [("refused", errors.INVALID_OPTION)]  # not a run
    with built.sandbox.create() as session:
        refused(built, lambda: session.run("perl", ["-e", "1"]), "permissions.processes")
        assert [e.kind for e in built.events][-1] == "refused"
        assert session.run("bash", ["-c", "echo still open"]).stdout == "still open\n"


def test_the_readme_pairing_of_deps_and_parse_sandbox_config_runs() -> None:
    config = parse_sandbox_config({"driver": "local", "limits": {"timeout": "5s"}})
    sandbox = Sandbox(SandboxDeps(config=config, driver=local_sandbox_driver(), load_entrypoints=False))
    try:
        assert sandbox.run("print(3)").stdout == "3\n"
    finally:
        sandbox.close()


def test_local_sandbox_driver_takes_the_permissions_mapping_and_refuses_wrong_types() -> None:
    driver = local_sandbox_driver(permissions={"processes": ["bash"]})
    sandbox = Sandbox(SandboxDeps(driver=driver, load_entrypoints=False))
    try:
        assert sandbox.run("echo ok", "bash").stdout == "ok\n"
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)")
        assert caught.value.code == errors.INVALID_OPTION and "permissions.processes" in caught.value.message
    finally:
        sandbox.close()
    mistakes: list[tuple[dict[str, Any], str]] = [
        ({"permissions": ["python3"]}, "permissions"),
        ({"permissions": {"processes": "python3"}}, "permissions.processes"),
        ({"max_processes": True}, "max_processes"),
        ({"programs": {"python": None}}, "programs"),
        ({"force_weak": "no"}, "force_weak"),
    ]
    for options, argument in mistakes:
        with pytest.raises(SandboxError) as caught:
            local_sandbox_driver(**options)
        assert caught.value.code in (errors.INVALID_OPTION, errors.UNKNOWN_CONFIG_KEY)
        assert argument in str(caught.value)


def test_a_driver_object_that_is_no_driver_is_refused_when_the_sandbox_is_built() -> None:
    with pytest.raises(SandboxError) as caught:
        Sandbox(SandboxDeps(driver=object(), load_entrypoints=False))
    assert caught.value.code == errors.INVALID_OPTION and "mainsdk_driver_capabilities" in caught.value.message


def test_an_on_output_that_raises_gives_the_apps_own_exception(build: Callable[..., Built]) -> None:
    built = build()

    def listener(stream: str, data: bytes) -> None:
        raise LookupError("the app's own bug")

    # Enough output that the listener is called while the command runs, inside the driver's exec.
    with pytest.raises(LookupError, match="the app's own bug"):
        built.sandbox.run(
            "import sys, time\nfor _ in range(50): print('x' * 10000, flush=True); time.sleep(0.01)", on_output=listener
        )


def _launcher(driver: LocalDriver) -> subprocess.Popen[bytes]:
    proc = driver._launcher._proc
    assert proc is not None and proc.poll() is None
    return proc


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _wait_dead(proc: subprocess.Popen[bytes]) -> None:
    proc.wait(timeout=30)


def test_a_session_after_a_launcher_death_is_0008_and_new_runs_recover(build: Callable[..., Built]) -> None:
    built = build()
    session = built.sandbox.create()
    assert session.run("bash", ["-c", "echo before"]).stdout == "before\n"
    launcher = _launcher(built.driver)
    os.kill(launcher.pid, signal.SIGKILL)  # the server alone: a run in flight could finish through its worker
    _wait_dead(launcher)
    for call in (
        lambda: session.run("bash", ["-c", "echo after"]),
        lambda: session.read("x"),
        lambda: session.run("bash"),
    ):
        with pytest.raises(SandboxError) as caught:
            call()
        error = caught.value
        assert (error.code, error.status, error.retryable) == (errors.NO_SESSION, 404, False), error
        assert "open a new session" in error.message or "no open sandbox session" in error.message
    assert session.closed
    with pytest.raises(SandboxError) as lookup:
        built.sandbox.get(session.id)
    assert lookup.value.code == errors.NO_SESSION
    assert built.sandbox.run("print('recovered')").stdout == "recovered\n"


def test_a_command_cut_by_a_launcher_death_may_have_run_and_is_not_retryable(build: Callable[..., Built]) -> None:
    built = build()
    session = built.sandbox.create()
    session.run("bash", ["-c", "true"])
    launcher = _launcher(built.driver)
    outcome: list[BaseException | object] = []
    command = threading.Thread(
        target=lambda: outcome.append(_raised(lambda: session.run("bash", ["-c", "sleep 1234"]))), daemon=True
    )
    command.start()
    running = _wait_for(lambda: _processes_under(launcher.pid, "sleep 1234"))
    # The launcher and every process under it, the command's workers with them: the command is cut mid-run.
    for pid in [launcher.pid, *_descendants(launcher.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    command.join(timeout=60)
    assert running and outcome, "the command neither ran nor ended"
    error = outcome[0]
    assert isinstance(error, SandboxError), error
    assert (error.code, error.ran, error.retryable) == (errors.DRIVER_UNAVAILABLE, None, False), error
    assert "may have run" in error.message and "not retryable" in error.message
    _wait_dead(launcher)
    with pytest.raises(SandboxError) as after:
        session.run("bash", ["-c", "true"])
    assert after.value.code == errors.NO_SESSION


def _raised(call: Callable[[], object]) -> BaseException | object:
    try:
        return call()
    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread to judge
        return exc


def _processes_under(pid: int, text: str) -> list[int]:
    found = []
    for child in _descendants(pid):
        with contextlib.suppress(OSError):
            if text.encode() in pathlib.Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" "):
                found.append(child)
    return found


def _wait_for(check: Callable[[], list[int]]) -> list[int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    return []


def test_the_async_twin_checks_the_same_arguments() -> None:
    async def main() -> None:
        sandbox = AsyncSandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))
        try:
            with pytest.raises(SandboxError) as caught:
                await sandbox.run("print(1)", files={"a": 5})  # type: ignore[dict-item]
            assert caught.value.message == "files['a']: must be str or bytes, not int"
        finally:
            await sandbox.aclose()

    asyncio.run(main())


def test_run_takes_timeout_like_run_code_and_start(build: Callable[..., Built]) -> None:
    # ``sandbox.run("print(1)", timeout="5s")`` was a raw TypeError while every other call took ``timeout``.
    sandbox = build().sandbox
    assert sandbox.run("print(1)", timeout="5s").stdout == "1\n"
    assert sandbox.run("while True: pass", timeout=1).stop == "timeout"
    twice = refused(build(), lambda: sandbox.run("print(1)", timeout="1s", limits={"timeout": "2s"}), "timeout")
    assert "given twice" in twice.message
    refused(build(), lambda: sandbox.run("print(1)", timeout="1h"), "limits.timeout")  # it only lowers the limit


_misspelt: dict[str, Any] = {"netwrk": []}
# Each public call with a keyword it does not take: (call, the name in the message, the suggestion).
UNKNOWN_KEYWORDS: list[tuple[str, Callable[[Any, Any, Any], object], str, str]] = [
    ("run", lambda sb, se, pr: sb.run("print(1)", timout="5s"), "sandbox.run()", "'timeout'"),
    ("create", lambda sb, se, pr: sb.create(idl="1m"), "sandbox.create()", "'idle'"),
    ("get", lambda sb, se, pr: sb.get(se.id, tenant="x"), "sandbox.get()", "session_id"),
    ("action", lambda sb, se, pr: sb.action(nme="x"), "sandbox.action()", "'name'"),
    ("files.read", lambda sb, se, pr: sb.files.read("file_x", tenant="t"), "sandbox.files.read()", "ref"),
    ("session.run", lambda sb, se, pr: se.run("python3", timout=1), "session.run()", "'timeout'"),
    ("session.write", lambda sb, se, pr: se.write("a", "b", mode="w"), "session.write()", "path, data"),
    ("session.read", lambda sb, se, pr: se.read("a", encoding="utf-8"), "session.read()", "path"),
    ("session.run_code", lambda sb, se, pr: se.run_code("1", langauge="python"), "session.run_code()", "'language'"),
    ("session.start", lambda sb, se, pr: se.start("python3", tmeout=1), "session.start()", "'timeout'"),
    ("session.interpreter", lambda sb, se, pr: se.interpreter(cdw="a"), "session.interpreter()", "'cwd'"),
    (
        "interpreter.run_code",
        lambda sb, se, pr: se.interpreter().run_code("1", timout=1),
        "interpreter.run_code()",
        "'timeout'",
    ),
    ("interpreter.restart", lambda sb, se, pr: se.interpreter().restart(1), "interpreter.restart()", "no arguments"),
    ("process.wait", lambda sb, se, pr: pr.wait(timout=1), "process.wait()", "'timeout'"),
    ("process.kill", lambda sb, se, pr: pr.kill(9), "process.kill()", "no arguments"),
    ("action.run", lambda sb, se, pr: sb.action().run({"code": "1"}, agnet="a"), "action.run()", "'agent'"),
    ("SandboxDeps", lambda sb, se, pr: SandboxDeps(**_misspelt), "SandboxDeps()", "'network'"),
    ("create_sandbox", lambda sb, se, pr: create_sandbox(**_misspelt), "create_sandbox()", "deps"),
    ("load_config", lambda sb, se, pr: load_config(**_misspelt), "load_config()", "path"),
    ("parse_sandbox_config", lambda sb, se, pr: parse_sandbox_config({}, **_misspelt), "parse_sandbox_config()", "raw"),
    ("file store", lambda sb, se, pr: LocalDirectoryFileStore(**_misspelt), "LocalDirectoryFileStore()", "max_bytes"),
]


@pytest.mark.parametrize(
    ("call", "name", "suggests"), [u[1:] for u in UNKNOWN_KEYWORDS], ids=[u[0] for u in UNKNOWN_KEYWORDS]
)
def test_a_keyword_a_call_does_not_take_is_0001_naming_the_valid_ones(
    build: Callable[..., Built], call: Callable[[Any, Any, Any], object], name: str, suggests: str
) -> None:
    # They were raw TypeErrors ("got an unexpected keyword argument"), unlike every other wrong argument.
    built = build()
    with built.sandbox.create() as session:
        process = session.start("python3", ["-c", "import time; time.sleep(30)"])
        error = refused(built, lambda: call(built.sandbox, session, process), name)
        assert error.message.startswith(name) and suggests in error.message, error.message
        assert "it takes" in error.message
        process.kill()


def test_the_async_twin_refuses_unknown_keywords_the_same_way() -> None:
    async def main() -> None:
        sandbox = AsyncSandbox(SandboxDeps(driver=local_sandbox_driver(), load_entrypoints=False))
        try:
            with pytest.raises(SandboxError) as caught:
                await sandbox.run("print(1)", timout="5s")  # type: ignore[call-arg]
            assert caught.value.code == errors.INVALID_OPTION and "did you mean 'timeout'" in caught.value.message
            assert (await sandbox.run("print(1)", timeout="5s")).stdout == "1\n"
            async with sandbox.create() as session:
                with pytest.raises(SandboxError, match=r"session.run_code\(\): 'timout' is not an option"):
                    await session.run_code("1", timout=1)  # type: ignore[call-arg]
                with pytest.raises(SandboxError, match=r"session.start\(\): 'timout' is not an option"):
                    session.start("python3", timout=1)  # type: ignore[call-arg]
        finally:
            await sandbox.aclose()

    asyncio.run(main())
