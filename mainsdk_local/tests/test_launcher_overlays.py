"""The launcher's overlays: a host folder bound read-only over a hidden site-packages, and nothing else.

This is how a package env reaches a box (``ExecSpec.overlays``); the server checks each pair, since a wrong
source would show the box a host folder, and a wrong target would cover a path the box needs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mainsdk_local.launcher.common import MOUNT_BASE
from mainsdk_local.launcher_client import ExecSpec, Launcher, LauncherBox
from mainsdk_local.programs import resolve_program

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")

PROGRAM = resolve_program("python", "python3")
MiB = 1 << 20


def py(code: str, overlays: tuple[tuple[str, str], ...] = ()) -> ExecSpec:
    """``code`` under the real interpreter with -I, its prefix bound, site-packages hidden or overlaid."""
    return ExecSpec(
        argv=(PROGRAM.executable, "-I", "-c", code),
        env={"LC_ALL": "C.UTF-8"},
        timeout=20.0,
        memory_bytes=256 * MiB,
        readonly_paths=PROGRAM.readonly_paths,
        hidden_paths=PROGRAM.hidden_paths,
        overlays=overlays,
    )


async def run(box: LauncherBox, spec: ExecSpec) -> tuple[int | None, str, str]:
    out, err = bytearray(), bytearray()
    result = await box.exec(spec, on_stdout=out.extend, on_stderr=err.extend)
    return result.exit_code, out.decode(), err.decode()


@pytest.fixture(scope="module")
def launcher() -> Iterator[Launcher]:
    instance = Launcher()
    if instance.isolation != "namespace" or not PROGRAM.hidden_paths:
        instance.close()
        pytest.skip("namespaces, or an interpreter with site-packages, are not available here")
    yield instance
    instance.close()


@pytest.fixture
async def box(launcher: Launcher) -> AsyncIterator[LauncherBox]:
    opened = await launcher.open_box(disk_bytes=64 * MiB)
    yield opened
    await opened.close()


@pytest.fixture
def env_dir(tmp_path: Path) -> str:
    """A folder holding one module, readable by the box's user."""
    folder = tmp_path / "env"
    folder.mkdir()
    (folder / "overlaid_module.py").write_text("VALUE = 42\n")
    for path in (tmp_path, folder, folder / "overlaid_module.py"):
        path.chmod(0o755)
    return os.path.realpath(folder)


CHECK = (
    "import json, os, sys\n"
    "try:\n"
    "    import overlaid_module\n"
    "    found = overlaid_module.VALUE\n"
    "except ImportError:\n"
    "    found = None\n"
    "try:\n"
    "    open(os.path.join({site!r}, 'planted.py'), 'w')\n"
    "    writable = True\n"
    "except OSError:\n"
    "    writable = False\n"
    "print(json.dumps([found, writable]))\n"
)


async def test_an_overlay_is_importable_read_only_and_only_where_asked(box: LauncherBox, env_dir: str) -> None:
    site = PROGRAM.hidden_paths[0]
    code = CHECK.format(site=site)
    exit_code, out, err = await run(box, py(code, overlays=((env_dir, site),)))
    assert exit_code == 0, err
    assert json.loads(out) == [42, False]  # importable with -I (site still reads site-packages), read-only
    assert not os.path.exists(os.path.join(env_dir, "planted.py"))
    exit_code, out, err = await run(box, py(code))  # the next exec without it: hidden again
    assert exit_code == 0, err
    assert json.loads(out)[0] is None


async def test_an_overlay_target_must_be_a_hidden_path(box: LauncherBox, env_dir: str) -> None:
    with pytest.raises(ValueError, match="is not one of the hidden paths"):
        await run(box, py("print(1)", overlays=((env_dir, "/usr/lib"),)))


@pytest.mark.parametrize("source", ["/proc/self", "/sys/kernel", "/dev", "/", "/etc", MOUNT_BASE])
async def test_an_overlay_source_that_would_show_the_box_the_host_is_refused(box: LauncherBox, source: str) -> None:
    with pytest.raises(ValueError, match="overlay source"):
        await run(box, py("print(1)", overlays=((source, PROGRAM.hidden_paths[0]),)))


async def test_an_overlay_source_must_be_a_canonical_existing_folder(
    box: LauncherBox, env_dir: str, tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to(env_dir)
    for source in (str(link), str(tmp_path / "missing"), os.path.join(env_dir, "overlaid_module.py")):
        with pytest.raises(ValueError, match="canonical, existing folder"):
            await run(box, py("print(1)", overlays=((source, PROGRAM.hidden_paths[0]),)))
