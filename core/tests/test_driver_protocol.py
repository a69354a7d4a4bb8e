"""The driver contract as types (``mainsdk.driver.Driver``, ``SessionDriver``) is the hookspecs pluggy calls.

The protocols are what mypy checks a third party's driver against; their methods are also the specs pluggy
calls and core checks at load, and ``async def`` or ``def`` there says whether core awaits a hook.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest
from mainsdk import Sandbox, SandboxDeps, hookspecs
from mainsdk.driver import (
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    Driver,
    ExecOutcome,
    Folder,
    OptionalDriverHooks,
    OutputSink,
    SessionDriver,
)
from mainsdk.errors import INVALID_OPTION, SandboxError
from mainsdk.hookspecs import DRIVER_HOOKS, REQUIRED_DRIVER_HOOKS, SYNC_DRIVER_HOOKS, hookimpl
from mainsdk.plugins import check_driver, make_plugin_manager
from mainsdk_driverkit.hostbox import HostBox, run_subprocess


def hooks_of(protocol: type) -> list[str]:
    return [name for name in vars(protocol) if name.startswith("mainsdk_")]


def test_the_required_hooks_checked_at_load_are_the_driver_protocols() -> None:
    assert (
        list(REQUIRED_DRIVER_HOOKS)
        == hooks_of(Driver)
        == [
            "mainsdk_driver_capabilities",
            "mainsdk_driver_start",
            "mainsdk_driver_exec",
            "mainsdk_driver_collect",
            "mainsdk_driver_stop",
        ]
    )
    assert hooks_of(SessionDriver) == ["mainsdk_driver_write_file", "mainsdk_driver_read_file"]


def test_pluggy_calls_the_protocol_methods_as_the_driver_hooks_specs() -> None:
    # One source of truth: the spec pluggy checks implementations against is the protocol's method itself, so
    # the types mypy checks and the arguments pluggy passes cannot drift apart.
    pm = make_plugin_manager(HostDriver(), load_entrypoints=False)
    for protocol in (Driver, SessionDriver, OptionalDriverHooks):
        for hook in hooks_of(protocol):
            spec = getattr(pm.hook, hook).spec
            assert spec is not None and spec.function is vars(protocol)[hook], hook
            assert spec.opts["firstresult"] == (hook != "mainsdk_driver_shutdown"), hook
    exec_spec = pm.hook.mainsdk_driver_exec.spec
    assert exec_spec is not None and exec_spec.argnames == ("box", "command", "output")
    assert "kills the command's whole process tree" in (exec_spec.function.__doc__ or "")
    assert set(hookspecs.hook_specs()) == {*DRIVER_HOOKS, "mainsdk_audit_event"}


def test_the_hooks_core_does_not_await_are_those_declared_def_not_async_def() -> None:
    assert SYNC_DRIVER_HOOKS == (
        "mainsdk_driver_capabilities",
        "mainsdk_driver_check",
        "mainsdk_network_policy",
        "mainsdk_driver_shutdown",
    )
    for hook in DRIVER_HOOKS:
        declared_async = inspect.iscoroutinefunction(hookspecs.hook_specs()[hook])
        assert declared_async == (hook not in SYNC_DRIVER_HOOKS), hook


def test_a_driver_missing_a_protocol_hook_is_still_refused_at_load() -> None:
    class NoCollect:
        @hookimpl
        def mainsdk_driver_capabilities(self) -> None: ...

        @hookimpl
        async def mainsdk_driver_start(self) -> None: ...

        @hookimpl
        async def mainsdk_driver_exec(self) -> None: ...

        @hookimpl
        async def mainsdk_driver_stop(self) -> None: ...

    with pytest.raises(SandboxError) as caught:
        check_driver(NoCollect())
    assert caught.value.code == INVALID_OPTION
    assert "driver NoCollect lacks the required hook mainsdk_driver_collect" in caught.value.message
    assert "mainsdk.driver.Driver" in caught.value.message


class HostDriver:
    """A whole driver on ``mainsdk_driverkit.hostbox``, the right way round: sync capabilities, async box hooks."""

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(isolation="weak", languages=frozenset({"python"}))

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> HostBox:
        return HostBox.create(spec)

    @hookimpl
    async def mainsdk_driver_exec(self, box: HostBox, command: Command, output: OutputSink) -> ExecOutcome:
        return await run_subprocess(os.path.realpath(sys.executable), command, output, cwd=box.work)

    @hookimpl
    async def mainsdk_driver_collect(self, box: HostBox, max_bytes: int) -> Collected:
        return box.collect(max_bytes)

    @hookimpl
    async def mainsdk_driver_stop(self, box: HostBox) -> None:
        box.remove()


def test_a_whole_driver_on_hostbox_runs_code() -> None:
    sandbox = Sandbox(SandboxDeps(driver=HostDriver(), load_entrypoints=False))
    try:
        result = sandbox.run("open('../out/r.txt', 'w').write('out'); print(6 * 7)")
    finally:
        sandbox.close()
    assert (result.exit_code, result.stdout, [f.name for f in result.files]) == (0, "42\n", ["r.txt"])


class FolderRecordingDriver(HostDriver):
    """A session driver on ``mainsdk_driverkit.hostbox`` that keeps what core hands its file hooks."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Folder, str]] = []

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(isolation="weak", languages=frozenset({"python"}), sessions=True)

    @hookimpl
    async def mainsdk_driver_write_file(self, box: HostBox, folder: Folder, path: str, data: bytes) -> None:
        self.calls.append(("write", folder, path))
        box.write(folder, path, data)

    @hookimpl
    async def mainsdk_driver_read_file(self, box: HostBox, folder: Folder, path: str) -> bytes:
        self.calls.append(("read", folder, path))
        return box.read(folder, path)


def test_file_hooks_are_told_the_folder_and_never_parse_a_prefix() -> None:
    driver = FolderRecordingDriver()
    sandbox = Sandbox(SandboxDeps(driver=driver, load_entrypoints=False))
    try:
        with sandbox.create() as session:
            session.write("d/in.txt", "in")
            session.run("python3", ["-c", "open('../out/r.txt', 'w').write(open('d/in.txt').read() + '!')"])
            assert session.read("../out/r.txt") == b"in!" and session.read("d/in.txt") == b"in"
            for bad in ("../out/../secret", "../out/", "../work/x", "../out//x"):
                with pytest.raises(SandboxError) as caught:
                    session.read(bad)
                assert caught.value.code == INVALID_OPTION, bad
    finally:
        sandbox.close()
    files = [call for call in driver.calls if call[2] in ("d/in.txt", "r.txt")]
    assert files == [
        ("write", Folder.WORK, "d/in.txt"),
        ("read", Folder.OUT, "r.txt"),
        ("read", Folder.WORK, "d/in.txt"),
    ]
    assert all(".." not in call[2] for call in driver.calls)  # refused paths never reached the driver


def test_an_async_hook_core_does_not_await_is_refused_at_load() -> None:
    # Every other hook is async def, so this slip is natural. It used to build, then every run failed with a raw
    # AttributeError ('coroutine' object has no attribute 'production'): a traceback, not a coded error.
    class AsyncCapabilities(HostDriver):
        @hookimpl
        async def mainsdk_driver_capabilities(self) -> Capabilities:  # type: ignore[override]
            return Capabilities(isolation="weak", languages=frozenset({"python"}))

    with pytest.raises(SandboxError) as caught:
        Sandbox(SandboxDeps(driver=AsyncCapabilities(), load_entrypoints=False))
    assert caught.value.code == INVALID_OPTION
    assert caught.value.message.startswith("driver AsyncCapabilities: mainsdk_driver_capabilities is async def")


def test_a_box_hook_that_returns_no_awaitable_is_a_driver_error_not_an_outage_to_retry(tmp_path: Path) -> None:
    # It used to come back as a retryable MAIN-SANDBOX-0006, "check that the driver's backend is up".
    class SyncStart(HostDriver):
        @hookimpl
        def mainsdk_driver_start(self, spec: BoxSpec) -> HostBox:  # type: ignore[override]
            return HostBox.create(spec, prefix=f"{tmp_path}/")

    sandbox = Sandbox(SandboxDeps(driver=SyncStart(), load_entrypoints=False))
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print(1)")
    finally:
        sandbox.close()
    assert (caught.value.code, caught.value.retryable) == (INVALID_OPTION, False)
    assert "mainsdk_driver_start returned HostBox, not an awaitable; write it as async def" in caught.value.message
