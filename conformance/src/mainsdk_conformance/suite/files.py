"""Files in and out: the out folder comes back as FileRefs that belong to the caller's tenant."""

from __future__ import annotations

import functools
import hashlib

import pytest
from mainsdk import SandboxError
from mainsdk.errors import INVALID_OPTION, NO_SESSION

from mainsdk_conformance.suite._helpers import refused
from mainsdk_conformance.target import Conformance


class TestFiles:
    """Files passed in land in the work folder; files written to ../out/ come back as FileRefs."""

    def test_out_files_come_back_as_file_refs(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        result = sandbox.run(
            "rows = open('data.csv').read().splitlines()\nopen('../out/count.txt', 'w').write(str(len(rows)))",
            files={"data.csv": "a\nb\nc\n"},
            feature="chart",
        )
        [ref] = result.files
        assert (ref.name, ref.size, ref.sha256) == ("count.txt", 1, hashlib.sha256(b"3").hexdigest())
        assert ref.id.startswith("file_") and sandbox.files.read(ref) == b"3" and sandbox.files.read(ref.id) == b"3"

    def test_nested_and_binary_out_files(self, conformance: Conformance) -> None:
        sandbox = conformance.sandbox()
        code = (
            "import os\nos.makedirs('../out/s/t')\n"
            "open('../out/s/t/b.bin', 'wb').write(bytes(range(256)))\nopen('../out/a.txt', 'w').write('a')\n"
        )
        result = sandbox.run(code)
        assert sorted((f.name, f.size) for f in result.files) == [("a.txt", 1), ("s/t/b.bin", 256)]
        by_name = {f.name: f for f in result.files}
        assert sandbox.files.read(by_name["s/t/b.bin"]) == bytes(range(256))

    def test_a_link_in_out_is_not_followed(self, conformance: Conformance) -> None:
        code = "import os\nos.symlink('/etc/hostname', '../out/link')\nopen('../out/real.txt', 'w').write('r')\n"
        result = conformance.sandbox().run(code)
        assert [f.name for f in result.files] == ["real.txt"]

    def test_out_files_past_limits_files_stop_with_output(self, conformance: Conformance) -> None:
        code = "for i in range(3):\n    open(f'../out/{i}.bin', 'wb').write(b'x' * 300 * 1024)\n"
        result = conformance.sandbox().run(code, limits={"files": "512KB"})
        assert result.stop == "output" and result.stop_code == "MAIN-SANDBOX-0004"
        assert sum(f.size for f in result.files) <= 512 * 1024

    def test_a_file_ref_belongs_to_its_tenant(self, conformance: Conformance) -> None:
        tenant = {"id": "tenant-a"}
        sandbox = conformance.sandbox(tenancy=lambda: tenant["id"])
        [ref] = sandbox.run("open('../out/r.txt', 'w').write('mine')").files
        tenant["id"] = "tenant-b"
        with pytest.raises(SandboxError) as caught:
            sandbox.files.read(ref)
        assert (caught.value.code, caught.value.status) == (NO_SESSION, 404)
        tenant["id"] = "tenant-a"
        assert sandbox.files.read(ref) == b"mine"

    def test_a_path_outside_the_work_folder_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        for name in ("../x.txt", "/etc/x.txt", "a/../../x.txt", "", "a//b"):
            refused(built, functools.partial(built.sandbox.run, "print(1)", files={name: "x"}), INVALID_OPTION)

    def test_files_above_limits_files_are_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        error = refused(
            built, lambda: built.sandbox.run("print(1)", files={"big.bin": b"x" * (1024 * 1024 + 1)}), INVALID_OPTION
        )
        assert "limits.files" in error.message
