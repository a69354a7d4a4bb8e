"""Driver discovery, plugin validation and ``import mainsdk`` with nothing else installed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from mainsdk import errors
from mainsdk.config import AppConfig, SandboxConfig
from mainsdk.entry_points import installed_drivers
from mainsdk.errors import SandboxError
from mainsdk.hookspecs import hookimpl
from mainsdk.plugins import load_driver, make_plugin_manager


def test_import_mainsdk_imports_no_driver_and_no_provider_sdk() -> None:
    code = "import sys, mainsdk; print(sorted(m for m in sys.modules if m.startswith(('mainsdk_', 'e2b', 'httpx'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_driver_names_the_installed_ones_and_the_package() -> None:
    with pytest.raises(SandboxError) as caught:
        load_driver("e2b-typo", AppConfig(sandbox=SandboxConfig(driver="e2b-typo")))
    assert caught.value.code == errors.INVALID_OPTION
    installed = ", ".join(d.id for d in installed_drivers()) or "none"
    assert f"installed drivers: {installed}" in caught.value.message
    with pytest.raises(SandboxError) as known:
        load_driver("vercel-sandbox" if "vercel-sandbox" not in installed else "nope", AppConfig())
    if "vercel-sandbox" not in installed:
        assert "pip install mainsdk-vercel" in known.value.message


class MisspelledDriver:
    @hookimpl
    def mainsdk_driver_rnu(self) -> None:  # a typo of a hook name must not pass silently
        pass


def test_a_misspelled_hook_is_an_error() -> None:
    with pytest.raises(SandboxError) as caught:
        make_plugin_manager(MisspelledDriver(), load_entrypoints=False)
    assert "mainsdk_driver_rnu" in caught.value.message
