"""The kernel's node package set (TypeScript's compiler), built with the real npm from the registry, and a
TypeScript cell in the real kernel transpiled by it where node cannot strip types (node < 22.13)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mainsdk.kernel_start import kernel_command
from mainsdk_driverkit.node_sets import MANIFEST, NODE_KERNEL_SETS, ensure_node_set, npm_environment

pytestmark = pytest.mark.skipif(
    shutil.which("npm") is None or shutil.which("node") is None, reason="the node set needs npm and node"
)
TOKEN = "0123456789abcdef0123456789abcdef"
MARK = b"\x1e" + TOKEN.encode() + b":"


def test_the_typescript_set_is_built_once_pinned_and_reused(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    folder = Path(ensure_node_set(NODE_KERNEL_SETS["typescript"], str(root)))
    package = json.loads((folder / "node_modules" / "typescript" / "package.json").read_text())
    assert package["version"] == "5.9.3" and (folder / MANIFEST).is_file()
    assert folder.parent == root.resolve() and len(folder.name) == 64  # sha256 of the pins
    stamp = (folder / MANIFEST).stat().st_mtime_ns
    assert ensure_node_set(NODE_KERNEL_SETS["typescript"], str(root)) == str(folder)  # cached: no second build
    assert (folder / MANIFEST).stat().st_mtime_ns == stamp
    assert not [p for p in root.iterdir() if p.name.startswith(".build-")]


def test_a_pin_whose_integrity_npm_does_not_install_is_refused(tmp_path: Path) -> None:
    ((name, version, _),) = NODE_KERNEL_SETS["typescript"]
    with pytest.raises(Exception) as refused:
        ensure_node_set(((name, version, "sha512-" + "A" * 86 + "=="),), str(tmp_path))
    assert "MAIN-SANDBOX-0001" in str(refused.value) and "not the kernel's pin" in str(refused.value)
    assert not [p for p in tmp_path.iterdir() if not p.name.endswith(".lock")]  # nothing kept


def test_npm_reads_no_setting_of_the_app_but_the_registry() -> None:
    env = npm_environment({"PATH": "/usr/bin", "npm_config_registry": "https://r", "npm_config_ignore_scripts": "0"})
    assert env.get("npm_config_registry") == "https://r" and "npm_config_ignore_scripts" not in env


def test_a_typescript_cell_is_transpiled_by_the_sets_typescript_where_node_cannot_strip_types(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None
    strips = subprocess.run(
        [node, "-p", "typeof require('node:module').stripTypeScriptTypes"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if strips == "function":
        pytest.skip("this node strips types itself: the executor does not load the set's typescript")
    site = ensure_node_set(NODE_KERNEL_SETS["typescript"], str(tmp_path / "cache"))
    start = {"language": "typescript", "cwd": None, "site": [site]}
    _, args, stdin = kernel_command(TOKEN, start)
    proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(stdin)
        frames = []
        for code in (
            "enum Color { Red = 1 }\ninterface P { n: number }\nconst p: P = { n: await Promise.resolve(2) };\np.n",
            "p.n + Color.Red",
            "const bad: number = ;",
        ):
            proc.stdin.write(json.dumps({"code": code, "timeout": 30, "grace": 1}).encode() + b"\n")
            proc.stdin.flush()
            out = b""
            while not (MARK in out and out.endswith(b"\n")):
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                assert chunk, f"the kernel ended with {proc.wait()}"
                out += chunk
            frames.append(json.loads(out.partition(MARK)[2]))
        assert [f["results"][-1]["data"] for f in frames[:2]] == ["2", "3"] and frames[0]["error"] is None
        assert frames[2]["error"]["name"] == "SyntaxError" and "Expression expected" in frames[2]["error"]["value"]
    finally:
        proc.kill()
        proc.wait()
