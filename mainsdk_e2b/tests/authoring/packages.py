"""Author the packages cassettes: record ``test_packages.py``'s own scenarios against ``fake_e2b.py``.

    python mainsdk_e2b/tests/authoring/packages.py [SCENARIO ...]   (all of them when none is named)

The recorder sits between the real e2b SDK and the stand-in, as for the suite (``author.py``). The stand-in
runs each command for real on this host: the probe of its ``python3``, pip's offline install of the wheels the
driver fetched with the app's pip, and the code (pandas and matplotlib drawing the chart): every output and
PNG in these cassettes is what ran here. Each uploaded wheel is kept as its sha256 (cassette.DIGEST_OVER).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from mainsdk_conformance.cassette import authored_meta  # noqa: E402

KEY = "e2b_" + "ab" * 20  # what the stand-in is given; scrubbed from every cassette
HOW = (
    "the real e2b SDK's requests, recorded against fake_e2b.py, which ran each command for real on the "
    "authoring host (python3 {version}): the probe, pip's offline install of the wheels the app's pip fetched, "
    "and the code; every output and PNG is what ran there; each uploaded wheel is kept as its sha256"
)


KERNEL_UNPACED = (
    "pace: the cell kernel's install commands answer at once (their frames' arrival times dropped): the offline "
    "pip install and compile of IPython took 15-25 s on the authoring host, which each replay would wait again"
)


def unpace_kernel_installs(data: dict[str, Any]) -> list[str]:
    """Drop the frames' ``at`` of every command installing the kernel's set; the edit to list, if any was made."""
    from mainsdk_e2b.packages import KERNEL_WHEELS

    edited = False
    for interaction in data["interactions"]:
        request = interaction["request"]
        if request["path"] != "/process.Process/Start" or KERNEL_WHEELS not in json.dumps(request["body"]):
            continue
        for frame in (interaction["response"].get("body") or {}).get("connect") or []:
            edited |= frame.pop("at", None) is not None
    return [KERNEL_UNPACED] if edited else []


def main(only: set[str]) -> None:
    """Record each scenario (those in ``only``, when given) into ``cassettes/packages/`` or ``cassettes/lifetime/``."""
    import platform

    import e2b_replay
    import fake_e2b
    import test_packages as scenarios

    api, sandbox = fake_e2b.serve()
    wheels = Path(tempfile.gettempdir()) / "mainsdk-e2b-authoring-wheels"
    # The made wheel's scenarios take it from a find-links folder, as their tests do; the chart's pandas and
    # matplotlib and the kernel's set (a session's first cell) come from the app's index, into one wheelhouse.
    made = scenarios.offline_index(Path(tempfile.mkdtemp(prefix="mainsdk-e2b-find-links-")))
    for scenario, env in (
        (scenarios.runs_and_a_session, made),
        (scenarios.the_tutorial_chart, {}),
        (scenarios.the_cell_kernels_packages, {}),
        (scenarios.a_set_that_cannot_be_resolved, made),
    ):
        name = scenario.__name__
        if only and name not in only:
            continue
        saved = {k: os.environ.get(k) for k in made}
        os.environ.update(env)
        try:
            with e2b_replay.provider(name, {"api": api, "sandbox": sandbox}, KEY) as server:
                seen = scenario(server, wheels, KEY)
                print(name, {k: v for k, v in seen.items() if "png" not in k and "files" not in k})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        path = scenarios.CASSETTES / f"{name}.json"
        data = json.loads(path.read_text())
        how = HOW.format(version=platform.python_version())
        data["meta"] = authored_meta(data["meta"], test=name, how=how, edited=unpace_kernel_installs(data))
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    import test_input
    import test_lifetime

    for lifetime, folder in (
        (test_lifetime.a_session_kept_alive_by_its_cells, test_lifetime.CASSETTES),
        (test_lifetime.a_session_at_e2bs_maximum, test_lifetime.CASSETTES),
        (test_input.cat_reads_its_live_stdin, test_input.CASSETTES),
    ):
        name = lifetime.__name__
        if only and name not in only:
            continue
        with e2b_replay.provider(name, {"api": api, "sandbox": sandbox}, KEY, folder) as server:
            print(name, lifetime(server, KEY))
        path = folder / f"{name}.json"
        data = json.loads(path.read_text())
        how = HOW.format(version=platform.python_version())
        data["meta"] = authored_meta(data["meta"], test=name, how=how, edited=unpace_kernel_installs(data))
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    assert not fake_e2b.STATE.boxes, f"the stand-in still runs {sorted(fake_e2b.STATE.boxes)}"


if __name__ == "__main__":
    main(set(sys.argv[1:]))
