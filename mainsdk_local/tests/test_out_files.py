"""Out files past the limit (issue 15): every file that fits comes back, in path order; the rest are named."""

from __future__ import annotations

from mainsdk import AsyncSandbox, Sandbox


def test_a_file_too_large_does_not_take_the_small_ones_with_it(sandbox: Sandbox) -> None:
    code = (
        "import os\nos.makedirs('../out/z')\n"
        "open('../out/big.bin', 'wb').write(b'x' * (3 << 20))\n"  # sorts first, and alone passes the limit
        "open('../out/small.txt', 'w').write('ok')\n"
        "open('../out/z/last.txt', 'w').write('fits')\n"
        "open('../out/a.txt', 'w').write('a')\n"
    )
    result = sandbox.run(code, limits={"files": "1MB"})
    assert [(f.name, f.size) for f in result.files] == [("a.txt", 1), ("small.txt", 2), ("z/last.txt", 4)]
    assert sandbox.files.read(result.files[1]) == b"ok"
    assert result.files_dropped == ("big.bin",)
    assert result.stop == "output"  # something was left out, and the result says so


def test_files_come_back_in_path_order(sandbox: Sandbox) -> None:
    code = "import os\nos.makedirs('../out/a')\nfor n in ['b.txt', 'a/z.txt', 'a.txt', 'c/']:\n"
    code += "    os.makedirs('../out/' + n) if n.endswith('/') else open('../out/' + n, 'w').write(n)\n"
    code += "open('../out/c/d.txt', 'w').write('d')\n"
    result = sandbox.run(code)
    assert [f.name for f in result.files] == ["a.txt", "a/z.txt", "b.txt", "c/d.txt"]
    assert result.files_dropped == ()


async def test_a_sessions_out_files_come_back_as_file_refs(async_sandbox: AsyncSandbox) -> None:
    async with async_sandbox.create() as session:
        await session.run(
            "python3", ["-c", "open('../out/b.txt', 'w').write('b'); open('../out/a.txt', 'w').write('a')"]
        )
        refs, dropped = await session.out_files()
        assert [(f.name, f.size) for f in refs] == [("a.txt", 1), ("b.txt", 1)] and dropped == ()
        assert await async_sandbox.files.read(refs[1]) == b"b"
