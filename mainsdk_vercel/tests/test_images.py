"""The driver in the images Vercel starts sandboxes from, against the stand-in laid out as those images are.

Every managed image has ``HOME=/vercel`` and ``WORKDIR /vercel`` and nothing in it: no ``/vercel/sandbox``
(github vercel/sandbox at 81d725b7, ``images/ubuntu/Dockerfile``, ``images/universal/Dockerfile``); the
stand-in (``conformance/simulator.py``) is that box, and refuses a command whose ``cwd`` is not a folder and an
upload whose ``x-cwd`` is not one. The driver must work there as Vercel's own clients do: no ``cwd`` on a
command, uploads as a tar of absolute names with ``x-cwd: /`` (``session.ts`` ``writeFiles``).

An image is named by ``sandbox.vercel.image``: v3 sends it as ``image``, where ``vercel/sandbox/<name>`` is a
managed image and a bare name a repository of the project's own registry; a legacy runtime (``python3.13``)
goes to ``POST /v2/sandboxes`` as ``runtime`` (``api-client.ts`` ``createSandbox``). What an error tells a user
to set must work when set: each such advice is followed here.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk.errors import INVALID_OPTION
from mainsdk_vercel._images import PYTHON_IMAGE

from mainsdk_vercel import VercelDriver

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "conformance"))
sys.path.insert(0, str(HERE))
Simulator: Any = importlib.import_module("simulator").Simulator
PROJECT = "prj_images"
CODE = """
import os
print(os.getcwd(), os.environ["HOME"], open("data.txt").read())
with open("../out/made.txt", "w") as out:
    out.write("made")
"""


@pytest.fixture
def sim() -> Iterator[Any]:
    standin = Simulator()
    standin.start()
    yield standin
    standin.stop()


def _sandbox(sim: Any, text: str, **driver: Any) -> Sandbox:
    made = VercelDriver(token=sim.token, project=PROJECT, base_url=sim.url, **driver)
    return Sandbox(SandboxDeps(config=load_config_text(text), driver=made, load_entrypoints=False))


def _post(sim: Any, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(
        sim.url + path, data=data, method="POST", headers={"authorization": f"Bearer {sim.token}", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(request) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_stand_in_is_the_default_images_box_and_refuses_a_cwd_that_is_not_there(sim: Any) -> None:
    status, answer = _post(sim, "/v3/sandboxes", {"projectId": PROJECT})
    created = json.loads(answer)
    assert (status, created["session"]["cwd"]) == (200, "/vercel")  # validators.ts Session.cwd: the WORKDIR
    session = created["session"]["id"]
    sim.sandboxes[session].read_status()  # past pending
    cmd = f"/v2/sandboxes/sessions/{session}/cmd"
    status, error = _post(sim, cmd, {"command": "pwd", "cwd": "/vercel/sandbox", "wait": True, "logs": True})
    assert (status, error["error"]["code"]) == (400, "bad_request")
    probe = "pwd; echo $HOME $LANG; command -v python3 pip node sudo; sudo -n true && echo sudo-ok; ls -A"
    status, lines = _post(sim, cmd, {"command": "bash", "args": ["-c", probe], "wait": True, "logs": True})
    out = "".join(json.loads(line).get("data", "") for line in lines.splitlines() if b'"stream"' in line)
    top = sim.sandboxes[session].top
    said = out.replace(top, "/vercel").split("\n")
    assert said[:2] == ["/vercel", "/vercel C.UTF-8"]  # HOME=/vercel, WORKDIR /vercel, ENV LANG=C.UTF-8
    assert [Path(p).name for p in said[2:6]] == ["python3", "pip", "node", "sudo"] and said[6] == "sudo-ok"
    assert said[7:] == [""]  # /vercel is empty: no /vercel/sandbox
    status, error = _post(
        sim, f"/v2/sandboxes/sessions/{session}/fs/write", b"", {"x-cwd": "/vercel/sandbox", "content-type": "x"}
    )
    assert (status, error["error"]["code"]) == (400, "bad_request")


def test_a_run_and_a_session_work_in_the_default_images_layout_sending_what_vercels_clients_send(sim: Any) -> None:
    sandbox = _sandbox(sim, "sandbox: {driver: vercel-sandbox, limits: {timeout: 30s}}\n")
    try:
        result = sandbox.run(CODE, files={"data.txt": "given"})
        assert (result.exit_code, result.stderr) == (0, "")
        top = next(iter(sim.sandboxes.values())).top
        assert result.stdout.replace(top, "/vercel") == "/vercel/sandbox/work /vercel given\n"
        assert [sandbox.files.read(ref) for ref in result.files] == [b"made"]
        with sandbox.create() as session:
            assert session.run("bash", ["-c", "echo kept > note.txt"]).exit_code == 0
            assert session.run("cat", ["note.txt"]).stdout == "kept\n"
    finally:
        sandbox.close()
    commands = [r["body"] for r in sim.requests if r["path"].endswith("/cmd")]
    writes = [r for r in sim.requests if r["path"].endswith("/fs/write")]
    assert commands and all("cwd" not in json.loads(body) for body in commands)  # the image's WORKDIR
    assert writes and {r["headers"]["x-cwd"] for r in writes} == {"/"}  # absolute names, as session.ts writes


def test_the_driver_makes_its_folders_in_a_legacy_runtime_and_in_an_image_alike(sim: Any) -> None:
    # python3.13 is a legacy runtime: sent as runtime to v2, whose session starts in /vercel/sandbox.
    for image in (None, "python3.13", PYTHON_IMAGE):
        sandbox = _sandbox(sim, "sandbox: {driver: vercel-sandbox, limits: {timeout: 30s}}\n", image=image)
        try:
            assert sandbox.run(CODE, files={"data.txt": "given"}).exit_code == 0
        finally:
            sandbox.close()
    creates = [(r["path"], json.loads(r["body"])) for r in sim.requests if r["path"].endswith("/sandboxes")]
    assert [(path, body.get("runtime"), body.get("image")) for path, body in creates] == [
        ("/v3/sandboxes", None, None),
        ("/v2/sandboxes", "python3.13", None),
        ("/v3/sandboxes", None, PYTHON_IMAGE),
    ]


def _advice(message: str) -> tuple[str, str]:
    """The ``sandbox.vercel.<key>: <value>`` an error tells the user to set."""
    found = re.search(r"sandbox\.vercel\.(\w+): ([\w./:-]+)", message)
    assert found is not None, message
    return found.group(1), found.group(2)


def test_the_advice_for_an_image_without_python_works_when_followed(sim: Any, tmp_path: Path) -> None:
    made = importlib.import_module("test_packages")
    pins = [made.DEMO]
    text = made.config(pins)
    wheels = made.MadeWheels(tmp_path)
    sandbox = _sandbox(sim, text, image="vercel/sandbox/node:24", wheelhouse=wheels)  # Node, no Python
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('ran')")
    finally:
        sandbox.close()
    assert (caught.value.code, caught.value.ran) == (INVALID_OPTION, False)
    key, value = _advice(caught.value.message)
    assert (key, value) == ("image", PYTHON_IMAGE)
    followed = _sandbox(sim, text, wheelhouse=wheels, **{key: value})
    try:
        result = followed.run("import mainsdk_demo; print(mainsdk_demo.__version__)")
    finally:
        followed.close()
    assert (result.exit_code, result.stdout) == (0, "1.0\n"), result.stderr


def test_an_image_vercel_does_not_have_is_0001_naming_the_setting_and_the_managed_images(sim: Any) -> None:
    sandbox = _sandbox(sim, "sandbox: {driver: vercel-sandbox, limits: {timeout: 30s}}\n", image="python3.14")
    try:
        with pytest.raises(SandboxError) as caught:
            sandbox.run("print('ran')")
    finally:
        sandbox.close()
    error = caught.value
    assert (error.code, error.ran, error.retryable) == (INVALID_OPTION, False, False)
    assert "sandbox.vercel.image: python3.14 is not an image Vercel has" in error.message
    key, value = _advice(error.message.split("; set e.g. ")[1])
    assert (key, value) == ("image", PYTHON_IMAGE)
    assert "vercel/sandbox/universal" in error.message and "project's own registry" in error.message


def test_an_image_and_a_runtime_both_set_are_one_0001() -> None:
    with pytest.raises(SandboxError) as caught:
        VercelDriver(token="t", project=PROJECT, image=PYTHON_IMAGE, runtime="python3.13")
    assert caught.value.code == INVALID_OPTION and "keep sandbox.vercel.image" in caught.value.message


def test_the_kernels_advice_for_an_old_python_names_an_image_that_has_a_newer_one() -> None:
    from mainsdk_vercel.packages import BoxPython, kernel_python_problem

    problem = kernel_python_problem(BoxPython(version="3.9", glibc="2.34"))
    assert problem is not None and _advice(problem) == ("image", PYTHON_IMAGE)
