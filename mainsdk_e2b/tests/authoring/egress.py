"""Author the egress cassettes: record ``test_egress.py``'s own scenarios against ``fake_e2b.py``.

    python mainsdk_e2b/tests/authoring/egress.py

The recorder sits between the real e2b SDK and the stand-in, as for the suite (``author.py``), and scrubs the
header's value to ``[scrubbed:OPENWEATHER_KEY]`` (``named``). The stand-in checks the create's ``network`` as
E2B's API does (``fake_e2b.network_problem``) and runs the code for real on this host.

What the stand-in cannot do, and is set by hand (listed in ``meta.edited``): E2B's egress proxy. The rules'
transform is applied by E2B's proxy outside the VM, whose code is not in e2b-dev/infra (the API validates and
stores the rules, ``handlers/sandbox_create.go``, and hands them to the orchestrator,
``orchestrator.proto`` ``SandboxNetworkEgressConfig.rules``; nothing public applies them). The stand-in's
commands run on the authoring host with no egress of their own, so the weather request cannot reach
api.openweathermap.org there: its line of stdout ("unreachable ...") is replaced by what the API answers a
request carrying a valid key ("200 Paris"). Everything else (the requests, the environment the code printed)
is what ran.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from mainsdk_conformance.cassette import authored_meta, mark_edited  # noqa: E402

KEY = "e2b_" + "ab" * 20  # what the stand-in is given; scrubbed from every cassette
HOW = (
    "the real e2b SDK's requests, recorded against fake_e2b.py (which checks a create's network as E2B's API "
    "does, handlers/sandbox_create.go validateNetworkConfig) and ran the code on the authoring host; "
    "the egress header's value scrubbed by name"
)


def _set_weather(data: dict[str, Any]) -> None:
    """Each command's "unreachable ..." line becomes what the API answers with the key set, listed in meta.edited."""
    for start in [i for i in data["interactions"] if i["request"]["path"] == "/process.Process/Start"]:
        for frame in start["response"]["body"]["connect"]:
            out = (((frame.get("json") or {}).get("event") or {}).get("data") or {}).get("stdout")
            if out is None:
                continue
            text = base64.b64decode(out).decode()
            lines = ["200 Paris\n" if line.startswith("unreachable ") else line for line in text.splitlines(True)]
            frame["json"]["event"]["data"]["stdout"] = base64.b64encode("".join(lines).encode()).decode()
    mark_edited(
        data["meta"],
        "stdout: the weather line is what api.openweathermap.org answers through E2B's egress proxy with the key "
        "set (the stand-in has no egress: it printed 'unreachable')",
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
    _set_weather(data)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    with e2b_replay.provider(
        "a_session_with_egress", upstreams, KEY, scenarios.CASSETTES, named=scenarios.NAMED
    ) as server:
        print("a_session_with_egress", scenarios.a_session_with_egress(server, KEY)["outputs"])
    path = scenarios.CASSETTES / "a_session_with_egress.json"
    data = json.loads(path.read_text())
    data["meta"] = authored_meta(data["meta"], test=path.stem, how=HOW)
    _set_weather(data)
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
