"""Wheels of the cell kernel's set made from the app's own installed distributions: no package index at run time.

The E2B and Vercel drivers depend on ``mainsdk.driver.KERNEL_PACKAGES["python"]`` (IPython, its closure and pip,
each pinned exactly), so the installer that installed the driver (pip, uv) put them in the app's environment,
checked against the index the app was installed from. At a session's first cell the driver makes a wheel of each
from what is installed (``importlib.metadata``: the files of its ``RECORD``), into a find-links folder; the
wheelhouse's pip then picks, with ``--no-index``, the ones the box's interpreter takes (a binary one such as
psutil only when the app's build fits the box's platform, else a 0001 naming it), and the driver uploads them.

A made wheel is byte for byte the same wherever the same versions are installed, by pip or by uv (and deflated
by the same zlib): its files sorted, each dated 1980-01-01 with one mode, without what an installer writes of its
own (``INSTALLER``, ``REQUESTED``, ``direct_url.json``, ``RECORD``, scripts, bytecode), ``RECORD`` written anew. So
the set is kept by content (the wheelhouse key), and a cassette's digest of an upload does not depend on the machine.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import io
import shutil
import sys
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path, PurePosixPath

from mainsdk.driver import INVALID_OPTION, SandboxError, canonical_name, parse_pin

# What an installer writes into a distribution's metadata of its own, not the wheel's: never in a made wheel.
INSTALLER_FILES = frozenset({"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json"})
DATE = (1980, 1, 1, 0, 0, 0)
_DRIVERS = "mainsdk-e2b and mainsdk-vercel"
_MADE: dict[tuple[str, ...], Path] = {}
_LOCK = threading.Lock()


def made_wheels(pins: Sequence[str], folder: Path) -> list[Path]:
    """A wheel of each of ``pins`` made from the app's installed distribution, written into ``folder``.

    Raises ``MAIN-SANDBOX-0001`` naming the package when the app's environment lacks it or has another version.
    """
    made = []
    for pin in pins:
        wanted = parse_pin(pin)
        try:
            dist = metadata.distribution(wanted.name)
        except metadata.PackageNotFoundError:
            raise SandboxError(INVALID_OPTION, _missing(pin, None), ran=False) from None
        if dist.version != wanted.version:
            raise SandboxError(INVALID_OPTION, _missing(pin, dist.version), ran=False)
        name, data = make_wheel(dist)
        path = folder / name
        path.write_bytes(data)
        made.append(path)
    return made


def kernel_find_links(pins: Sequence[str]) -> Path:
    """A folder holding ``made_wheels(pins)``, made once per process (removed at its exit) and reused."""
    key = tuple(pins)
    with _LOCK:
        folder = _MADE.get(key)
        if folder is None or not folder.is_dir():
            folder = Path(tempfile.mkdtemp(prefix="mainsdk-kernel-made-"))
            atexit.register(shutil.rmtree, folder, True)
            try:
                made_wheels(pins, folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            _MADE[key] = folder
        return folder


def _missing(pin: str, installed: str | None) -> str:
    has = "has no" if installed is None else f"has {parse_pin(pin).name} {installed}, not"
    return (
        f"cells: the app's environment ({sys.prefix}) {has} {pin}, which the cell kernel's IPython set needs "
        f"(mainsdk.driver.KERNEL_PACKAGES; the drivers {_DRIVERS} depend on it, so installing the driver "
        f"installs it): pip install '{pin}' into that environment; nothing ran"
    )


def make_wheel(dist: metadata.Distribution) -> tuple[str, bytes]:
    """The wheel file name and bytes of an installed distribution: its files as installed, made reproducible."""
    files = sorted(_wheel_files(dist), key=lambda item: item[0])
    info = next(
        (Path(str(dist.locate_file(p))).parent for p in dist.files or () if PurePosixPath(str(p)).name == "WHEEL"),
        None,
    )
    if info is None:
        raise SandboxError(
            INVALID_OPTION,
            f"cells: {dist.metadata['Name']} {dist.version} in the app's environment was not installed from a wheel "
            "(no WHEEL file), so no wheel can be made of it for the box: reinstall it with pip or uv",
            ran=False,
        )
    tags = _tags((info / "WHEEL").read_text("utf-8"))
    name = canonical_name(dist.metadata["Name"]).replace("-", "_")
    filename = f"{name}-{dist.version}-{tags}.whl"
    record_name = f"{info.name}/RECORD"
    buffer = io.BytesIO()
    record = []
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, path in files:
            data = path.read_bytes()
            _write(archive, arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arcname},sha256={digest},{len(data)}")
        record.append(f"{record_name},,")
        _write(archive, record_name, ("\n".join(record) + "\n").encode())
    return filename, buffer.getvalue()


def _wheel_files(dist: metadata.Distribution) -> list[tuple[str, Path]]:
    """(name in the wheel, path) of each installed file that came from the wheel, relative to site-packages."""
    out = []
    for entry in dist.files or ():
        parts = PurePosixPath(str(entry)).parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or parts[-1].endswith((".pyc", ".pyo")):
            continue  # scripts (bin/), bytecode: each installer makes its own
        if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] in INSTALLER_FILES:
            continue
        if len(parts) == 1 and parts[0].endswith(".virtualenv"):
            continue  # the marker virtualenv's seeder leaves beside the pip it put in an environment
        path = Path(str(dist.locate_file(entry)))
        if path.is_file():
            out.append(("/".join(parts), path))
    return out


def _tags(wheel_file: str) -> str:
    """The compressed tag triple of a WHEEL file's ``Tag:`` lines (``py3-none-any``, ``cp36-abi3-a.b``)."""
    triples = [line.split(":", 1)[1].strip().split("-") for line in wheel_file.splitlines() if line.startswith("Tag:")]
    if not triples:
        return "py3-none-any"
    return "-".join(".".join(sorted({t[i] for t in triples})) for i in range(3))


def _write(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    info.create_system = 3  # unix, whatever the app's system: the same bytes everywhere
    archive.writestr(info, data, compresslevel=6)
