"""The ``example`` driver: a template to copy when writing a mainsdk sandbox driver.

Each box is a temp folder and each command a plain subprocess (no shell) in it, with an empty
environment, its own session (setsid) so the whole process group can be killed, and an RLIMIT_AS
memory cap. That is ``weak`` isolation: the code shares the host's network, file system and user.
Development only, so it declares ``production=False`` and core refuses it when ``MAINSDK_ENV=production``.

The folder and the subprocess come from the driver kit's ``mainsdk_driverkit.hostbox`` (what any driver
whose box is a folder on the host needs); a driver for a remote backend replaces each hook's body with calls
to it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

from mainsdk.config import AppConfig
from mainsdk.driver import (
    INVALID_OPTION,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    OutputSink,
    SandboxError,
    SessionDriver,
)
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.hostbox import HostBox, run_subprocess

__all__ = ["ExampleDriver", "driver_from_config"]

# The programs core asks for, by name. Python is the app's own base interpreter, resolved through its venv
# link so the code does not get the app's installed packages. No node: V8 reserves about 1 GB of address
# space at start, so RLIMIT_AS cannot cap it; a driver must not offer a language it cannot limit.
PROGRAMS: dict[str, str | None] = {"python3": os.path.realpath(sys.executable), "bash": shutil.which("bash")}


class ExampleDriver:
    """The driver plugin: one ``@hookimpl`` per hook of ``mainsdk.hookspecs``."""

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(
            isolation="weak",
            languages=frozenset({"python", "bash"}),
            network=False,  # it cannot give hosts, so core refuses a run that asks for any (MAIN-SANDBOX-0005)
            memory_limit=True,
            memory_limit_scope="process",  # RLIMIT_AS holds each process on its own, not the tree
            sessions=True,
            production=False,
            network_reach=None,  # it gives no hosts: no filtering to declare, no extra reach
            reports_signals=True,  # a crash comes back as 128 + N and the signal's name (see exec below)
            # Named in MAIN-SANDBOX-0006: what could fail here is local, not a provider.
            outage_remedy="check that the temp folder has free space and that python3 and bash can be started",
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> Any:
        return None  # there is no egress policy to send; core never gives this driver hosts

    @hookimpl
    def mainsdk_driver_check(self, command: Command) -> None:
        # Optional: refuse before anything starts. Core calls it before a run's box starts and before each
        # session command is sent, and audits the refusal as "refused": nothing ran.
        if PROGRAMS.get(command.program) is None:
            message = f"the example driver runs {sorted(PROGRAMS)}, not {command.program!r}"
            raise SandboxError(INVALID_OPTION, message, ran=False)

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> HostBox:
        # A temp folder with work/ (the cwd, holding spec.files) and out/; blocking file work off the loop.
        return await asyncio.to_thread(HostBox.create, spec, prefix="mainsdk-example-")

    @hookimpl
    async def mainsdk_driver_exec(self, box: HostBox, command: Command, output: OutputSink) -> ExecOutcome:
        executable = PROGRAMS[command.program]  # mainsdk_driver_check refused any other
        assert executable is not None
        # setsid, environment exactly command.env, output pushed as it comes, the whole group killed at the
        # timeout, on cancel (core's output limit and deadline) and when it ends; RLIMIT_AS per process. A crash
        # comes back as the signal's name, which core reports as 128 + N.
        return await run_subprocess(executable, command, output, cwd=box.work, memory=box.limits.memory)

    @hookimpl
    async def mainsdk_driver_write_file(self, box: HostBox, folder: Folder, path: str, data: bytes) -> None:
        box.write(folder, path, data)  # refuses a path a link the code made would lead out of the box

    @hookimpl
    async def mainsdk_driver_read_file(self, box: HostBox, folder: Folder, path: str) -> bytes:
        return box.read(folder, path)  # missing or not a regular file: MAIN-SANDBOX-0008 (404), not an outage

    @hookimpl
    async def mainsdk_driver_collect(self, box: HostBox, max_bytes: int) -> Collected:
        return await asyncio.to_thread(box.collect, max_bytes)  # regular files only, never following a link

    @hookimpl
    async def mainsdk_driver_stop(self, box: HostBox) -> None:
        await asyncio.to_thread(box.remove)


def driver_from_config(config: AppConfig) -> SessionDriver[HostBox]:
    """The entry point (``mainsdk.drivers: example``): build the driver from the parsed ``main.yaml``.

    Typed as ``SessionDriver[HostBox]``, so mypy checks every hook's signature against the contract.
    """
    return ExampleDriver()
