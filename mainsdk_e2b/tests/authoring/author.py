"""Author the e2b cassettes: record the conformance tests against ``fake_e2b.py``, then mark them authored.

    python mainsdk_e2b/tests/authoring/author.py [-k EXPR]

The recorder (``mainsdk-conformance``'s record mode) sits between the real e2b
SDK and the stand-in, so each request is byte for byte what the SDK sends.
Then ``finish.py`` writes the fault cassettes and corrects the answers the
stand-in cannot give (hosts on the internet). Re-record live
instead with ``mainsdk-conformance record --driver e2b --tests mainsdk_e2b/tests/conformance``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASSETTES = HERE.parent / "conformance" / "cassettes"
NOTE = "authored: the real e2b SDK's requests, recorded against fake_e2b.py (written from the SDK's source)"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    import fake_e2b

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
        if data["meta"].get("made") == "recorded":
            data["meta"]["made"] = "authored"
            data["meta"]["note"] = NOTE
            path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
