"""Author the e2b cassettes: record the conformance tests against ``fake_e2b.py``, then mark them authored.

    python mainsdk_e2b/tests/authoring/author.py [--fresh-tmp] [-k EXPR]

``--fresh-tmp`` (root) runs it all with this host's ``/tmp`` a fresh tmpfs, in a mount namespace of its own:
the stand-in's commands see this host's ``/tmp`` and ``/proc``, which an E2B VM never does
(``TestSecrets::test_egress_header_values_are_not_in_the_box`` reads them all). Each cassette it writes says so.

The recorder (``mainsdk-conformance``'s record mode) sits between the real e2b
SDK and the stand-in, so each request is byte for byte what the SDK sends.
Then ``finish.py`` writes the fault cassettes and sets the answers the
stand-in cannot give (an egress firewall), listing each edit in ``meta.edited``.
Re-record live instead with ``mainsdk-conformance record --driver e2b``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASSETTES = HERE.parent / "conformance" / "cassettes"
NOTE = "authored: the real e2b SDK's requests, recorded against fake_e2b.py (written from the SDK's source)"
# What a stand-in recording's output is: each command (core's cell kernel too) really ran here, through fake_e2b.py.
FRESH_TMP = (
    "recorded with the authoring host's /tmp a fresh tmpfs (unshare -m): the stand-in's commands see the host's "
    "/tmp and /proc, where other checkouts of this suite hold its made-up secret in their source, which an E2B VM "
    "never does"
)
RAN = (
    "fake_e2b.py ran each command for real on the authoring host (core's cell kernel included), so every "
    "output, frame and PNG in it is what the code printed there"
)


def main(argv: list[str]) -> int:
    if "--fresh-tmp" in argv:
        rest = [arg for arg in argv if arg != "--fresh-tmp"]
        mount = 'mount -t tmpfs none /tmp && exec "$0" "$@"'
        os.execvp("unshare", ["unshare", "-m", "sh", "-c", mount, sys.executable, __file__, "--in-fresh-tmp", *rest])
    fresh = "--in-fresh-tmp" in argv
    argv = [arg for arg in argv if arg != "--in-fresh-tmp"]
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
    env = {**os.environ, "E2B_API_KEY": "e2b_" + "ab" * 20}
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
            data["meta"]["how"] = how = f"{how}; {RAN}"
            changed = True
        if written and fresh and FRESH_TMP not in how:
            data["meta"]["how"] = f"{how}; {FRESH_TMP}"
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
