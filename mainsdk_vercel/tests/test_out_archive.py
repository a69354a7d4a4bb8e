"""The out archive is the code's to tamper with: nothing in it is trusted (names, links, sizes, count)."""

from __future__ import annotations

import gzip
import io
import random
import tarfile

from mainsdk_vercel.driver import MAX_OUT_ENTRIES, _unpack_out


def archive(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return gzip.compress(raw.getvalue())


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def test_plain_files_come_back_by_name_and_the_rest_is_skipped_with_a_reason() -> None:
    data = archive(
        (entry("./", tarfile.DIRTYPE), b""),
        (entry("./b/c.bin"), bytes(range(256))),
        (entry("./a.txt"), b"hi"),
        (entry("./link", tarfile.SYMTYPE, "/etc/passwd"), b""),
        (entry("./hard", tarfile.LNKTYPE, "a.txt"), b""),
        (entry("./fifo", tarfile.FIFOTYPE), b""),
    )
    got = _unpack_out(data, 1 << 20)
    assert [(f.name, f.data) for f in got.files] == [("a.txt", b"hi"), ("b/c.bin", bytes(range(256)))]
    assert dict(got.skipped) == {
        "fifo": "not a regular file",
        "hard": "not a regular file",
        "link": "not a regular file",
    }
    assert not got.truncated


def test_names_outside_out_are_never_files() -> None:
    data = archive(
        (entry("/etc/shadow"), b"x"),
        (entry("../../escape"), b"x"),
        (entry("./a/../../up"), b"x"),
        (entry("./ok"), b"y"),
    )
    got = _unpack_out(data, 1 << 20)
    assert [f.name for f in got.files] == ["ok"]
    assert [reason for _, reason in got.skipped] == ["not a plain relative name"] * 3


def test_the_files_limit_holds_and_a_bomb_costs_no_memory() -> None:
    # 64 MB of zeros compresses to ~64 KB: past the limit it is skipped without being read.
    data = archive((entry("./small"), b"s" * 10), (entry("./bomb"), bytes(64 * 1024 * 1024)))
    assert len(data) < 1024 * 1024
    got = _unpack_out(data, 1024)
    assert [f.name for f in got.files] == ["small"] and got.truncated
    assert dict(got.skipped) == {"bomb": "past limits.files"}


def test_a_name_twice_keeps_the_first() -> None:
    got = _unpack_out(archive((entry("./a"), b"first"), (entry("./a"), b"second")), 1 << 20)
    assert [(f.name, f.data) for f in got.files] == [("a", b"first")]


def test_too_many_entries_are_truncated() -> None:
    members = [(entry(f"./f{i}"), b"") for i in range(MAX_OUT_ENTRIES + 5)]
    got = _unpack_out(archive(*members), 1 << 20)
    assert len(got.files) == MAX_OUT_ENTRIES and got.truncated


def test_garbage_and_cut_archives_never_raise() -> None:
    whole = archive((entry("./a"), b"a" * 5000), (entry("./b"), b"b" * 5000))
    rng = random.Random(14)
    for _ in range(300):
        cut = whole[: rng.randrange(len(whole))]
        mutated = bytearray(whole)
        for _ in range(rng.randrange(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        for data in (cut, bytes(mutated), bytes(rng.randrange(256) for _ in range(rng.randrange(200)))):
            got = _unpack_out(data, 1 << 20)
            assert all(f.name in ("a", "b") for f in got.files)
    assert _unpack_out(whole[:-30], 1 << 20).truncated
