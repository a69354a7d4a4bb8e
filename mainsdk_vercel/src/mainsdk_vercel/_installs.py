"""Package and kernel installs in a sandbox: the box's python probed, wheels fetched app-side, installed offline.

The steps and the scripts are ``packages.py``'s; this is what runs them in a sandbox, in the box's turn to send.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mainsdk.driver import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from mainsdk_driverkit.installed import kernel_find_links
from mainsdk_driverkit.wheelhouse import Wheelhouse, WheelSet, failure_message, kernel_failure

from mainsdk_vercel._box import ROOT, VercelBox
from mainsdk_vercel._images import NO_PYTHON_ADVICE
from mainsdk_vercel._lifetimes import INSTALL_TIMEOUT, Lifetimes
from mainsdk_vercel._session_api import Capture, Run, SessionApi
from mainsdk_vercel.packages import (
    INSTALL,
    INSTALL_WHEELS,
    INSTALLER_ZIP,
    KERNEL,
    KERNEL_INSTALL,
    KERNEL_WHEELS,
    PROBE,
    BoxPython,
    installer_zip,
    kernel_python_problem,
)


class Installs:
    """``sandbox.packages`` and the cell kernel's set, for one driver: ``python`` is the image's, once probed."""

    def __init__(self, session: SessionApi, lifetimes: Lifetimes, wheelhouse: Wheelhouse) -> None:
        self._session = session
        self._lifetimes = lifetimes
        self._wheelhouse = wheelhouse
        self.python: BoxPython | None = None  # the image's python3, probed by the first box that needs packages

    async def prefetch(self, pins: Sequence[str]) -> WheelSet | None:
        """The wheels of ``pins`` before a create, when the image's python is known already; else None."""
        if not pins or self.python is None:
            return None
        return await asyncio.to_thread(self._wheelhouse.ensure, self.python, pins)

    async def fetch(self, box: VercelBox, pins: Sequence[str]) -> WheelSet:
        """The wheels of ``pins`` for ``box``'s python, asking it first (``probe``) if no box has yet."""
        if self.python is None:
            self.python = await self.probe(box)
        return await asyncio.to_thread(self._wheelhouse.ensure, self.python, pins)

    @staticmethod
    async def upload(wheels: WheelSet, folder: str) -> dict[str, bytes]:
        """The files that put ``wheels`` in ``folder`` (relative to ``ROOT``), with the installer that installs them."""
        upload = {f"{folder}/{name}": data for name, data in (await asyncio.to_thread(wheels.read)).items()}
        upload[f"{folder}/{INSTALLER_ZIP}"] = await asyncio.to_thread(installer_zip)
        return upload

    async def probe(self, box: VercelBox) -> BoxPython:
        """The box's ``python3`` as pip sees a platform (one command, once per driver)."""
        captured = Capture()
        run = Run()
        await self._session.run(box, "python3", ["-I", "-c", PROBE], {}, run, captured)
        try:
            if run.exit_code != 0:
                raise ValueError(captured.text("stderr"))
            return BoxPython.parse(captured.text("stdout"))
        except ValueError:
            raise SandboxError(
                INVALID_OPTION,
                "packages: the Vercel sandbox's image has no usable python3 to install sandbox.packages.python "
                f"into (it said {captured.text('stderr')[-300:]!r}); choose an image with Python "
                f"({NO_PYTHON_ADVICE})",
                ran=False,
            ) from None

    async def install(self, box: VercelBox, folder: str, pins: Sequence[str]) -> None:
        """Install the uploaded wheels offline (``INSTALL``); a failure is 0001 quoting it, before any code ran."""
        captured = Capture()
        run = Run()
        try:
            async with asyncio.timeout(INSTALL_TIMEOUT):
                await self._session.run(box, "bash", ["-c", INSTALL, folder, INSTALL_WHEELS, *pins], {}, run, captured)
        except TimeoutError:
            raise SandboxError(
                DRIVER_UNAVAILABLE,
                f"packages: installing {', '.join(pins)} in the Vercel sandbox took more than "
                f"{INSTALL_TIMEOUT:.0f}s; retry",
                ran=False,
            ) from None
        if run.exit_code != 0:
            said = captured.text("stderr") + captured.text("stdout")
            where = "in the Vercel sandbox (offline, from the wheels fetched for it)"
            raise SandboxError(INVALID_OPTION, failure_message(pins, said, where), ran=False)

    async def install_kernel(self, box: VercelBox, pins: Sequence[str]) -> None:
        """Probe (once per driver), fetch, upload and install the kernel's set, in the box's turn to send."""
        async with box.sending:
            await self._lifetimes.ensure(box)
            if self.python is None:
                try:
                    self.python = await self.probe(box)
                except SandboxError as exc:
                    if exc.code != INVALID_OPTION:
                        raise
                    raise kernel_failure(exc.message, "in the Vercel sandbox: its python3 did not answer") from None
            problem = kernel_python_problem(self.python)
            if problem is not None:
                raise SandboxError(INVALID_OPTION, problem, ran=False)
            # Made from the app's installed distributions (the driver depends on the set): no index at run time.
            made = await asyncio.to_thread(kernel_find_links, pins)
            try:
                wheels = await asyncio.to_thread(self._wheelhouse.ensure, self.python, pins, find_links=made)
            except SandboxError as exc:
                if exc.code != INVALID_OPTION:
                    raise
                raise kernel_failure(exc, f"as wheels for {self.python.describe()}") from None
            folder = f".mainsdk/kernel-wheels-{wheels.key[:16]}"
            await self._session.write(box, await self.upload(wheels, folder), level=1)  # wheels are zips already
            captured = Capture()
            run = Run()
            args = ["-c", KERNEL_INSTALL, f"{ROOT}/{folder}", KERNEL_WHEELS, KERNEL]
            try:
                async with asyncio.timeout(INSTALL_TIMEOUT):
                    await self._session.run(box, "bash", args, {}, run, captured)
            except TimeoutError:
                raise SandboxError(
                    DRIVER_UNAVAILABLE,
                    f"cells: installing the kernel's IPython in the Vercel sandbox took more than "
                    f"{INSTALL_TIMEOUT:.0f}s; retry",
                    ran=False,
                ) from None
            if run.exit_code != 0:
                said = captured.text("stderr") + captured.text("stdout")
                raise kernel_failure(said, "in the Vercel sandbox (offline, from the wheels fetched for it)")
