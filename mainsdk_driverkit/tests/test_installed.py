"""The kernel's set made from the app's installed distributions, and the index's outage told from a missing package.

Real pip throughout: the made wheels are picked by ``pip download --no-index`` for a box interpreter, and the
index is a real HTTP server on loopback that fails (503) or does not have the package (404).
"""

from __future__ import annotations

import hashlib
import http.server
import threading
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from mainsdk.errors import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from mainsdk_driverkit.installed import INSTALLER_FILES, kernel_find_links, made_wheels, make_wheel
from mainsdk_driverkit.wheelhouse import Wheelhouse
from test_wheelhouse import Interpreter

ATTRS = f"attrs=={metadata.version('attrs')}"  # installed in every env the kit is tested in (a dependency)


def test_a_made_wheel_holds_the_installed_files_and_is_the_same_bytes_each_time(tmp_path: Path) -> None:
    dist = metadata.distribution("attrs")
    name, data = make_wheel(dist)
    assert name == f"attrs-{dist.version}-py3-none-any.whl"
    assert make_wheel(metadata.distribution("attrs")) == (name, data)  # reproducible: kept by content
    path = tmp_path / name
    path.write_bytes(data)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        assert names == [*sorted(names[:-1]), names[-1]] and names[-1].endswith(".dist-info/RECORD")
        assert {i.date_time for i in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        assert not [n for n in names if n.rsplit("/", 1)[-1] in INSTALLER_FILES - {"RECORD"} or n.endswith(".pyc")]
        init = Path(str(dist.locate_file("attrs/__init__.py")))
        assert archive.read("attrs/__init__.py") == init.read_bytes()
        record = archive.read(names[-1]).decode().splitlines()
    assert len(record) == len(names) and all(line.count(",") == 2 for line in record)


def test_the_box_gets_the_made_wheels_through_pip_with_no_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An index that does not exist: the kernel's set never asks one.
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    links = kernel_find_links([ATTRS])
    assert kernel_find_links([ATTRS]) == links  # made once per process
    house = Wheelhouse(str(tmp_path))
    wheels = house.ensure(Interpreter("3.11"), [ATTRS], find_links=links)
    made = (links / wheels.names[0]).read_bytes()
    assert wheels.read() == {wheels.names[0]: made}
    assert house.ensure(Interpreter("3.11"), [ATTRS], find_links=links) == wheels and house.downloads == 1


def test_a_pin_the_app_lacks_or_has_in_another_version_is_0001_naming_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as caught:
        made_wheels(["attrs==0.0.1"], tmp_path)
    assert caught.value.code == INVALID_OPTION and caught.value.ran is False
    assert f"has attrs {metadata.version('attrs')}, not attrs==0.0.1" in caught.value.message
    with pytest.raises(SandboxError) as caught:
        made_wheels(["doesnotexist-xyz==1.0"], tmp_path)
    assert "has no doesnotexist-xyz==1.0" in caught.value.message and "pip install" in caught.value.message


class Index(http.server.BaseHTTPRequestHandler):
    """A package index on loopback answering every page with one status."""

    status = 503

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = b"down" if self.status >= 500 else b"not found"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(status: int) -> Iterator[str]:
    handler = type("Handler", (Index,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def failing_index() -> Iterator[str]:
    yield from _serve(503)


@pytest.fixture
def empty_index() -> Iterator[str]:
    yield from _serve(404)


def test_an_index_outage_is_a_retryable_0006_naming_the_index(
    failing_index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", failing_index)
    with pytest.raises(SandboxError) as caught:
        Wheelhouse(str(tmp_path)).ensure(Interpreter("3.11"), ["six==1.16.0"])
    error = caught.value
    assert error.code == DRIVER_UNAVAILABLE and error.retryable and error.ran is False
    assert f"the package index {failing_index} did not answer" in error.message and "six==1.16.0" in error.message


def test_a_package_the_index_does_not_have_stays_0001(
    empty_index: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", empty_index)
    with pytest.raises(SandboxError) as caught:
        Wheelhouse(str(tmp_path)).ensure(Interpreter("3.11"), ["doesnotexist-xyz==1.0"])
    error = caught.value
    assert error.code == INVALID_OPTION and not error.retryable
    assert "doesnotexist-xyz==1.0" in error.message


def test_the_made_set_is_keyed_by_its_content(tmp_path: Path) -> None:
    links = kernel_find_links([ATTRS])
    digest = hashlib.sha256((links / next(p.name for p in links.iterdir())).read_bytes()).hexdigest()
    from mainsdk_driverkit.wheelhouse import find_links_key

    key = find_links_key(links)
    assert key.startswith("find-links:") and digest not in key  # the folder's digest, not one file's
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in links.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    assert find_links_key(copy) == key
    (copy / path.name).write_bytes(path.read_bytes() + b"\0")
    assert find_links_key(copy) != key
