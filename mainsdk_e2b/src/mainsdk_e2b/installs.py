"""The box's packages and the cell kernel's own, installed offline from wheels the app fetched (``packages.py``).

One probe of the template's python per template (kept by the ``Installs`` of the driver), the wheels fetched
for exactly that interpreter into the app's wheelhouse, uploaded (``Transfers.upload``: a deadline that grows
with their bytes) and installed in the box with ``--no-index --no-deps``: the sandbox keeps the egress policy
the run named.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from e2b.sandbox.commands.command_handle import CommandExitException
from mainsdk.driver import INVALID_OPTION, SandboxError
from mainsdk_driverkit.installed import kernel_find_links
from mainsdk_driverkit.wheelhouse import Wheelhouse, failure_message, kernel_failure

from mainsdk_e2b.box import E2BBox
from mainsdk_e2b.layout import BASE_PATH
from mainsdk_e2b.packages import (
    ENV_PYTHON,
    KERNEL_WHEELS,
    PROBE,
    WHEELS,
    BoxPython,
    install_line,
    kernel_install_line,
    kernel_python_problem,
)
from mainsdk_e2b.transfer import Transfers

# The box's python is probed in seconds; installing pandas and matplotlib offline takes about 15 s.
PROBE_TIMEOUT = 60.0
INSTALL_TIMEOUT = 600.0
WHERE = "in the E2B box (offline, from the wheels fetched for it)"


@attrs.define
class Installs:
    """The driver's installs: its template, its wheelhouse, and each template's python once probed."""

    template: str | None
    wheelhouse: Wheelhouse
    transfers: Transfers
    box_pythons: dict[str | None, BoxPython] = attrs.field(factory=dict)

    def known_python(self) -> BoxPython | None:
        """The template's python, if a box of it was probed already."""
        return self.box_pythons.get(self.template)

    async def wheels(self, box_python: BoxPython, packages: Sequence[str]) -> list[Path]:
        """The wheels of ``packages`` for ``box_python``, in the app's wheelhouse (0001 if the set cannot be had)."""
        return (await asyncio.to_thread(self.wheelhouse.ensure, box_python, packages)).paths

    async def probe(self, box: E2BBox) -> BoxPython:
        """The template's python as pip picks wheels for it: one command in the box, once per template."""
        provider = self.transfers.provider
        with provider("ask the template's python3 for its version"):
            try:
                done = await box.sandbox.commands.run(
                    f"python3 -E -s -c {shlex.quote(PROBE)}",
                    envs={"PATH": BASE_PATH},
                    timeout=PROBE_TIMEOUT,
                    request_timeout=self.transfers.floor,
                )
                found = BoxPython.from_probe(done.stdout)
            except CommandExitException as exc:
                raise SandboxError(
                    INVALID_OPTION,
                    f"packages: the E2B template's python3 did not answer ({' '.join(exc.stderr.split())[:300]}); "
                    "packages need python3 in the template",
                    ran=False,
                ) from None
            except ValueError as exc:
                raise SandboxError(INVALID_OPTION, f"packages: {exc}", ran=False) from None
        self.box_pythons[self.template] = found
        return found

    async def upload_and_install(
        self, box: E2BBox, packages: Sequence[str], wheels: Sequence[Path], files: Sequence[dict[str, Any]]
    ) -> None:
        """Upload the work ``files`` and the wheels in one request, then install the wheels (with packages)."""
        entries: list[dict[str, Any]] = [*files]
        entries += [{"path": f"{WHEELS}/{wheel.name}", "data": wheel.read_bytes()} for wheel in wheels]
        await self.transfers.upload(box, entries, "upload the work files")
        if not packages:
            return
        with self.transfers.provider("install the packages"):
            try:
                await box.sandbox.commands.run(
                    install_line([wheel.name for wheel in wheels]),
                    envs={"PATH": BASE_PATH},
                    timeout=INSTALL_TIMEOUT,
                    request_timeout=self.transfers.floor,
                )
            except CommandExitException as exc:
                raise SandboxError(
                    INVALID_OPTION, failure_message(packages, exc.stdout + exc.stderr, WHERE), ran=False
                ) from None
        box.python = ENV_PYTHON

    async def install_kernel(self, box: E2BBox, pins: Sequence[str]) -> None:
        """Probe (once per template), fetch, upload and install the cell kernel's set (the caller holds the turn)."""
        box_python = self.known_python() or await self.probe(box)
        problem = kernel_python_problem(box_python)
        if problem is not None:
            raise SandboxError(INVALID_OPTION, problem, ran=False)
        # Made from the app's installed distributions (the driver depends on the set): no index at run time.
        made = await asyncio.to_thread(kernel_find_links, pins)
        try:
            wheels = (await asyncio.to_thread(self.wheelhouse.ensure, box_python, pins, find_links=made)).paths
        except SandboxError as exc:
            if exc.code != INVALID_OPTION:
                raise
            raise kernel_failure(exc, f"as wheels for {box_python.describe()}") from None
        entries = [{"path": f"{KERNEL_WHEELS}/{wheel.name}", "data": wheel.read_bytes()} for wheel in wheels]
        await self.transfers.upload(box, entries, "upload the cell kernel's packages")
        with self.transfers.provider("install the cell kernel's packages", box):
            try:
                await box.sandbox.commands.run(
                    kernel_install_line([wheel.name for wheel in wheels]),
                    envs={"PATH": BASE_PATH},
                    user="root",
                    timeout=INSTALL_TIMEOUT,
                    request_timeout=self.transfers.floor,
                )
            except CommandExitException as exc:
                raise kernel_failure(exc.stdout + exc.stderr, WHERE) from None
