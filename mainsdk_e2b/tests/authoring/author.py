"""Author the e2b cassettes: record the conformance tests against ``fake_e2b.py``, then mark them authored.

    python mainsdk_e2b/tests/authoring/author.py [-k EXPR]

The recorder (``mainsdk-conformance``'s record mode) sits between the real e2b
SDK and the stand-in, so each request is byte for byte what the SDK sends.
Then ``finish.py`` writes the fault cassettes and sets the answers the
stand-in cannot give (an egress firewall), listing each edit in ``meta.edited``.
Re-record live instead with ``mainsdk-conformance record --driver e2b``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASSETTES = HERE.parent / "conformance" / "cassettes"
NOTE = "authored: the real e2b SDK's requests, recorded against fake_e2b.py (written from the SDK's source)"
# What a stand-in recording's output is: each command (core's cell kernel too) really ran here, through fake_e2b.py.
RAN = (
    "fake_e2b.py ran each command for real on the authoring host (core's cell kernel included), so every "
    "output, frame and PNG in it is what the code printed there"
)


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    import fake_e2b
    from mainsdk_conformance.cassette import mark_edited
    from packages import unpace_kernel_installs

    if not argv:
        # Re-author everything: record mode keeps an authored cassette with edits, and saves only tests that
        # pass (the network ones cannot, without a firewall; finish.py derives them). These are all ours.
        for path in CASSETTES.rglob("*.json"):
            if json.loads(path.read_text())["meta"].get("made") == "authored":
                path.unlink()

    before = {path: path.stat().st_mtime_ns for path in CASSETTES.rglob("*.json")}
    api, sandbox = fake_e2b.serve()
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "mainsdk_conformance.plugin",
        str(HERE.parent / "conformance"),
        "-q",
        "-p",
        "no:cacheprovider",
        "--conformance-record",
        "--conformance-upstream",
        f"api={api}",
        "--conformance-upstream",
        f"sandbox={sandbox}",
        "-k",
        "not TestFaults",
        *argv,
    ]
    env = {**__import__("os").environ, "E2B_API_KEY": "e2b_" + "ab" * 20}
    status = subprocess.run(command, env=env, check=False).returncode
    for path in sorted(CASSETTES.rglob("*.json")):
        data = json.loads(path.read_text())
        changed = False
        if data["meta"].get("made") == "recorded":
            data["meta"]["made"] = "authored"
            data["meta"]["how"] = NOTE
            changed = True
        how = str(data["meta"].get("how", ""))
        written = before.get(path) != path.stat().st_mtime_ns  # only what this run recorded
        if (
            written
            and how.startswith("recorded against a stand-in")
            and RAN not in how
            and not data["meta"].get("edited")
        ):
            data["meta"]["how"] = f"{how}; {RAN}"
            changed = True
        if written and data["meta"].get("made") == "authored":
            # Each session's first cell installs the kernel's IPython (mainsdk_driver_kernel_site): its time on
            # the authoring host is no VM's, and every replay would wait it again.
            for edit in unpace_kernel_installs(data):
                mark_edited(data["meta"], edit)
                changed = True
        if changed:
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
