"""A third party's whole mainsdk driver, written against the public contract only: each box a temp folder
on the host and each command a plain subprocess in it (weak isolation). It passes the conformance suite."""

import asyncio
import os
import sys

import attrs
from mainsdk.config import AppConfig
from mainsdk.driver import BoxSpec, Capabilities, Collected, Command, ExecOutcome, Folder, OutputSink, SessionDriver
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.hostbox import HostBox, run_subprocess


@attrs.frozen
class ThirdPartyConfig:  # sandbox.third-party, declared in mainsdk.driver_configs: core checks it, with lines
    python: str = attrs.field(factory=lambda: os.path.realpath(sys.executable))  # the interpreter for python3


@attrs.define
class SubprocessDriver:
    config: ThirdPartyConfig

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:  # no network: no policy hook, hosts are refused
        return Capabilities(
            isolation="weak", languages=frozenset({"python", "bash"}), sessions=True, reports_signals=True
        )

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> HostBox:
        return await asyncio.to_thread(HostBox.create, spec, prefix="third-party-")

    @hookimpl
    async def mainsdk_driver_exec(self, box: HostBox, command: Command, output: OutputSink) -> ExecOutcome:
        program = self.config.python if command.program == "python3" else command.program
        return await run_subprocess(program, command, output, cwd=box.work)

    @hookimpl
    async def mainsdk_driver_write_file(self, box: HostBox, folder: Folder, path: str, data: bytes) -> None:
        box.write(folder, path, data)

    @hookimpl
    async def mainsdk_driver_read_file(self, box: HostBox, folder: Folder, path: str) -> bytes:
        return box.read(folder, path)

    @hookimpl
    async def mainsdk_driver_collect(self, box: HostBox, max_bytes: int) -> Collected:
        return await asyncio.to_thread(box.collect, max_bytes)

    @hookimpl
    async def mainsdk_driver_stop(self, box: HostBox) -> None:
        await asyncio.to_thread(box.remove)


def driver_from_config(config: AppConfig) -> SessionDriver[HostBox]:  # mypy checks the hooks' signatures
    return SubprocessDriver(config.sandbox.section("third-party", ThirdPartyConfig))
