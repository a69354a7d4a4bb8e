"""A driver's own ``sandbox.<name>:`` section, checked by ``mainsdk check`` when that driver is installed.

The driver here is a real installed distribution as far as ``importlib.metadata`` is concerned: a
``*.dist-info`` folder with its entry points on ``sys.path``, found the way pip-installed drivers are found.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from mainsdk.config import load_config_text
from mainsdk.errors import UNKNOWN_CONFIG_KEY
from mainsdk_check.report import format_human

from mainsdk_check import run_check

MODULE = "acme_check_driver"

# Only what the check reads: the section's class, and a driver of the same distribution that owns it.
DRIVER_SOURCE = '''
import attrs


@attrs.frozen
class AcmeConfig:
    """sandbox.acme: this driver's own settings."""

    region: str = "eu"
    replicas: int = 1


def driver_from_config(config):
    raise NotImplementedError("never built: the check loads the section, not the driver")
'''


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Install the ``acme`` driver (distribution ``acme-sandbox``) with its section ``sandbox.acme``."""
    (tmp_path / f"{MODULE}.py").write_text(DRIVER_SOURCE)
    info = tmp_path / "acme_sandbox-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sandbox\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent(f"""\
            [mainsdk.drivers]
            acme = {MODULE}:driver_from_config

            [mainsdk.driver_configs]
            acme = {MODULE}:AcmeConfig
            """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    sys.modules.pop(MODULE, None)
    yield tmp_path
    sys.modules.pop(MODULE, None)


def test_an_installed_drivers_section_is_checked_even_when_another_driver_is_configured(acme: Path) -> None:
    project = acme / "app"
    project.mkdir()
    (project / "main.yaml").write_text("sandbox:\n  driver: nimbus\n  acme:\n    region: us\n    replicaz: 2\n")
    load_config_text((project / "main.yaml").read_text())  # the app loads it: acme is not its driver
    result = run_check(cwd=project)
    assert [(f.code, f.path, f.line) for f in result.findings] == [(UNKNOWN_CONFIG_KEY, "main.yaml", 5)]
    assert 'did you mean "replicas"?' in result.findings[0].message


def test_a_section_no_installed_driver_declares_is_noted_not_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    (tmp_path / "main.yaml").write_text("sandbox:\n  limits: { timeout: 5s }\n  nimbus:\n    region: us\n")
    result = run_check(cwd=tmp_path)
    assert (result.findings, result.errors, result.exit_status) == ((), (), 0)
    assert result.notes == (
        "main.yaml:3: sandbox.nimbus is not checked: no installed driver declares that section; "
        "install the driver that uses it to check it",
    )
    assert "note: main.yaml:3: sandbox.nimbus is not checked" in format_human(result, tmp_path)
