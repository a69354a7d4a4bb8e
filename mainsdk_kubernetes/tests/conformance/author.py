"""Author the conformance cassettes: record the suite against the stand-in cluster (``standin_*.py``).

    python mainsdk_kubernetes/tests/conformance/author.py [PYTEST-ARGS]   # e.g. -k TestRun
    python mainsdk_kubernetes/tests/conformance/author.py --finish        # only the finishing (after a live run)

The recorder forwards the driver's API requests to the stand-in's API server on loopback, so it labels what it
writes ``made: authored`` (``how: recorded against a stand-in on this machine``); the pods' sandboxd is the same
stand-in, in this process, as in replay.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

import pytest  # noqa: E402
import standin_pods  # noqa: E402
from mainsdk_conformance.cassette import authored_meta, mark_edited  # noqa: E402
from standin_apiserver import ApiServer, status_body  # noqa: E402
from standin_pods import Pods  # noqa: E402

MEMORY = 64 * 1024 * 1024
CASSETTES = HERE / "cassettes"
BASE = CASSETTES / "TestRun" / "test_python_prints.json"
JSON = {"content-type": "application/json"}


def _status(code: int, reason: str, message: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """An API server's failure answer, as a cassette's response."""
    body = status_body(code, reason, message)
    return {"status": code, "headers": {**JSON, **(headers or {})}, "body": {"json": body}}


def _index(data: dict[str, Any], method: str, part: str) -> int:
    return next(
        i
        for i, x in enumerate(data["interactions"])
        if x["request"]["method"] == method and part in x["request"]["path"]
    )


PROBES_EDIT = (
    "probes: the template's reads (pool, template, RuntimeClass) made optional and held 4 times over: they come "
    "once per driver built, which follows how many tests a run selects (the plugin's capability gate builds one)"
)
PROBE_COPIES = 4


def _is_probe(interaction: dict[str, Any]) -> bool:
    request = interaction["request"]
    kinds = ("/sandboxwarmpools/", "/sandboxtemplates/", "/runtimeclasses/")
    return request["method"] == "GET" and any(kind in request["path"] for kind in kinds)


def with_optional_probes(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its template reads first, each optional and held ``PROBE_COPIES`` times (idempotent)."""
    probes = [x for x in data["interactions"] if _is_probe(x)]
    if not probes:
        return data
    unique = list({json.dumps(x["request"], sort_keys=True): x for x in probes}.values())
    held = [dict(copy.deepcopy(x), optional=True) for _ in range(PROBE_COPIES) for x in unique]
    data["interactions"] = held + [x for x in data["interactions"] if not _is_probe(x)]
    return data


def finish_probes() -> None:
    """Every cassette's template reads made optional and held several times (``PROBES_EDIT``)."""
    for path in sorted(CASSETTES.rglob("*.json")):
        data = with_optional_probes(json.loads(path.read_text()))
        mark_edited(data["meta"], PROBES_EDIT)
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def finish_faults() -> None:
    """The ``TestFaults`` cassettes, derived from a plain run's: each fault as the API server answers it.

    The command stream is sandboxd's gRPC, which no cassette holds, so a reset of it and a delay of its answer
    are not authored here (the conftest lists those two tests as expected failures, saying why).
    """
    base = json.loads(BASE.read_text())

    def save(test: str, data: dict[str, Any], edit: str) -> None:
        data["meta"] = authored_meta(base["meta"], test=test, how=f"derived from {BASE.name}", edited=[edit])
        (CASSETTES / "TestFaults").mkdir(parents=True, exist_ok=True)
        (CASSETTES / "TestFaults" / f"{test}.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    # 429 with Retry-After on the create (the API server's priority and fairness), then the create taken.
    data = copy.deepcopy(base)
    create = _index(data, "POST", "/sandboxclaims")
    throttled = copy.deepcopy(data["interactions"][create])
    throttled["response"] = _status(
        429, "TooManyRequests", "Too many requests, please try again later.", {"retry-after": "1"}
    )
    data["interactions"].insert(create, throttled)
    save("test_429_with_retry_after_is_retried_after_the_wait", data, "fault: 429 with Retry-After: 1 at the create")
    # 503 on the create: nothing made; the driver deletes the claim it may have made, which is not there.
    data = copy.deepcopy(base)
    create = _index(data, "POST", "/sandboxclaims")
    delete = copy.deepcopy(data["interactions"][_index(data, "DELETE", "/sandboxclaims/")])
    data["interactions"][create]["response"] = _status(
        503, "ServiceUnavailable", "the server is currently unable to handle the request"
    )
    delete["response"] = _status(404, "NotFound", "sandboxclaims.extensions.agents.x-k8s.io not found")
    data["interactions"] = [*data["interactions"][: create + 1], delete]
    save("test_503_is_0006_and_retryable", data, "fault: 503 at the create")
    # The sandbox vanished between the claim's ready event and its read: 404, then the claim deleted.
    data = copy.deepcopy(base)
    sandbox = _index(data, "GET", "/sandboxes/")
    data["interactions"][sandbox]["response"] = _status(404, "NotFound", "sandboxes.agents.x-k8s.io not found")
    delete = _index(data, "DELETE", "/sandboxclaims/")
    data["interactions"] = [*data["interactions"][: sandbox + 1], data["interactions"][delete]]
    save("test_a_sandbox_that_vanished_mid_run_is_0006", data, "fault: 404 for the adopted sandbox")


def main() -> int:
    """Record every test (or those PYTEST-ARGS select) against a fresh stand-in."""
    pods = Pods(memory=MEMORY)
    api = ApiServer(pods, namespace="mainsdk", pool="python-pool", memory="64Mi")
    api.start()
    standin_pods.ACTIVE = api
    try:
        status = int(
            pytest.main(
                [
                    str(HERE),
                    "--conformance-record",
                    "--conformance-upstream",
                    f"api={api.url}",
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    *sys.argv[1:],
                ]
            )
        )
        if BASE.exists():
            finish_faults()
        finish_probes()
        return status
    finally:
        standin_pods.ACTIVE = None
        api.stop()
        pods.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["--finish"]:
        finish_probes()
        sys.exit(0)
    sys.exit(main())
