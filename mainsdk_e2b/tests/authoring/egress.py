"""Author the egress cassettes: record ``test_egress.py``'s own scenarios against ``fake_e2b.py``.

    python mainsdk_e2b/tests/authoring/egress.py

The recorder sits between the real e2b SDK and the stand-in, as for the suite (``author.py``), and scrubs the
header's value to ``[scrubbed:OPENWEATHER_KEY]`` (``named``). The stand-in checks the create's ``network`` as
E2B's API does (``fake_e2b.network_problem``) and runs the code for real on this host.

E2B's egress proxy is the stand-in's own (``fake_egress.py``): for the rules' hosts it ends TLS with a CA appended
to the system bundle only, as envd appends E2B's (e2b-dev/infra ``packages/envd/internal/host/cacerts.go``), sets
the rule's headers and answers as the API answers a request with a valid key (this host reaches no internet: the
answer is OpenWeatherMap's shape, said in ``meta.how``). Nothing is set by hand: every line of stdout is what
each client printed here, so a driver that leaves a client with its own store records that client's failure.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from mainsdk_conformance.cassette import authored_meta, mark_edited  # noqa: E402
from packages import unpace_kernel_installs  # noqa: E402

KEY = "e2b_" + "ab" * 20  # what the stand-in is given; scrubbed from every cassette
HOW = (
    "the real e2b SDK's requests, recorded against fake_e2b.py (which checks a create's network as E2B's API "
    "does, handlers/sandbox_create.go validateNetworkConfig) and ran the code on the authoring host, its egress "
    "proxy (fake_egress.py) ending TLS for the rules' hosts with a CA appended to the system bundle only, as envd "
    "does (packages/envd/internal/host/cacerts.go), and answering as api.openweathermap.org answers a valid key; "
    "the egress header's value scrubbed by name"
)


def main() -> None:
    import e2b_replay
    import fake_e2b
    import test_egress as scenarios

    api, sandbox = fake_e2b.serve()
    upstreams = {"api": api, "sandbox": sandbox}
    with e2b_replay.provider(
        "the_weather_example", upstreams, KEY, scenarios.CASSETTES, named=scenarios.NAMED
    ) as server:
        print(
            "the_weather_example",
            {k: v for k, v in scenarios.the_weather_example(server, KEY).items() if k != "events"},
        )
    path = scenarios.CASSETTES / "the_weather_example.json"
    data = json.loads(path.read_text())
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=HOW)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    with e2b_replay.provider(
        "a_session_with_egress", upstreams, KEY, scenarios.CASSETTES, named=scenarios.NAMED
    ) as server:
        print("a_session_with_egress", scenarios.a_session_with_egress(server, KEY)["outputs"])
    path = scenarios.CASSETTES / "a_session_with_egress.json"
    data = json.loads(path.read_text())
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=HOW)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    with e2b_replay.provider("cells_with_egress", upstreams, KEY, scenarios.CASSETTES, named=scenarios.NAMED) as server:
        print("cells_with_egress", scenarios.cells_with_egress(server, KEY))
    path = scenarios.CASSETTES / "cells_with_egress.json"
    data = json.loads(path.read_text())
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=HOW)
    for edit in unpace_kernel_installs(data):
        mark_edited(data["meta"], edit)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    os.environ["FAKE_E2B_TRANSFORM_RULES"] = "0"  # a team without the network-transform-rules flag
    try:
        with e2b_replay.provider(
            "a_team_without_network_rules", upstreams, KEY, scenarios.CASSETTES, named=scenarios.NAMED
        ) as server:
            print("a_team_without_network_rules", scenarios.a_team_without_network_rules(server, KEY)["error"])
    finally:
        os.environ.pop("FAKE_E2B_TRANSFORM_RULES", None)
    path = scenarios.CASSETTES / "a_team_without_network_rules.json"
    data = json.loads(path.read_text())
    how = (
        HOW + "; FAKE_E2B_TRANSFORM_RULES=0: a team without E2B's network-transform-rules flag (featureflags/flags.go)"
    )
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=how)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    assert not fake_e2b.STATE.boxes, f"the stand-in still runs {sorted(fake_e2b.STATE.boxes)}"


if __name__ == "__main__":
    main()
