"""The out folder in one request: the shell that archives it in the box, and the reader that takes the archive
as untrusted input."""

from __future__ import annotations

import io
import tarfile

from mainsdk.driver import Collected, OutFile

from mainsdk_e2b.layout import HOME, OUT

# The archive a run's command leaves: named after its pid (the start event's), so the driver knows it.
ARCHIVE = "/tmp/mainsdk-out-{pid}.tar"
# Bytes read of an archive past limits.files: tar headers and padding (512 B a member, more for long names).
ARCHIVE_SLACK = 1024 * 1024


def archive_script(limit: int) -> str:
    """Shell that archives the out folder's regular files, by name, up to ``limit`` bytes, as ``ARCHIVE``.

    A file that would pass the limit is left out and a member ``truncated``
    says so; links, devices and folders are never archived (``find -type f``
    does not follow links, ``--hard-dereference`` stores hard links as files).
    Every name is under ``out/``; the driver still checks each one.
    """
    archive = ARCHIVE.format(pid="$$")
    return "\n".join(
        [
            f'a={archive}; rm -rf -- "$a.d" "$a"; mkdir -m 700 -- "$a.d" && : > "$a.d/list"',
            f"if [ -d {OUT} ] && [ ! -L {OUT} ] && cd {OUT}; then",
            "  find . -mindepth 1 -type f -printf '%s %P\\0' | LC_ALL=C sort -z -t ' ' -k 2 > \"$a.d/found\"; t=0",
            "  while IFS= read -r -d '' e; do z=${e%% *}; n=${e#* }",
            f'    if [ $((t + z)) -le {limit} ]; then t=$((t + z)); printf \'out/%s\\0\' "$n" >> "$a.d/list"',
            '    else : > "$a.d/truncated"; fi',
            '  done < "$a.d/found"',
            "fi",
            'set --; [ -e "$a.d/truncated" ] && set -- -C "$a.d" truncated',
            f'tar -cf "$a.d/tar" -C {HOME} --null --no-recursion --hard-dereference -T "$a.d/list" "$@" 2>/dev/null',
            'mv -fT -- "$a.d/tar" "$a"',
        ]
    )


def extract_out_archive(data: bytes, max_bytes: int, *, cut: bool = False) -> Collected:
    """The out files in an archive ``archive_script`` made, checked as untrusted input.

    Only regular members under ``out/`` with a plain relative name are taken
    (no ``..``, no absolute path, no empty part, no link), each once, at most
    ``max_bytes`` in all. ``cut``: the archive was read only in part. A broken
    archive keeps what came before the break and says it was truncated.
    """
    files: list[OutFile] = []
    skipped: list[tuple[str, str]] = []
    truncated = cut
    total = 0
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as archive:
            for member in archive:
                if member.name == "truncated" and member.isreg():
                    truncated = True
                    continue
                name = member.name[len("out/") :] if member.name.startswith("out/") else ""
                parts = name.split("/")
                if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
                    skipped.append((member.name, "not a plain name under out/"))
                    continue
                if not member.isreg():
                    skipped.append((name, "not a regular file"))
                    continue
                if name in seen:
                    skipped.append((name, "archived twice"))
                    continue
                if total + member.size > max_bytes:
                    truncated = True
                    skipped.append((name, "past limits.files"))
                    continue
                stream = archive.extractfile(member)
                content = stream.read() if stream is not None else b""
                if len(content) != member.size:
                    truncated = True
                    break
                seen.add(name)
                total += len(content)
                files.append(OutFile(name, content))
    except (tarfile.TarError, EOFError, OSError):
        truncated = True  # what came before the break stands
    return Collected(tuple(files), truncated, tuple(skipped))
