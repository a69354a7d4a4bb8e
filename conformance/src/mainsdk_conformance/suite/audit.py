"""Every run audited with the code's hash, never the code, its output or a secret value."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from mainsdk import Capabilities, SandboxError, secret
from mainsdk.audit import code_sha256
from mainsdk.errors import INVALID_OPTION

from mainsdk_conformance.target import SECRET, SECRET_VALUES, Conformance, iter_strings


class TestAudit:
    """One audit event per run with the seed's fields."""

    def test_one_event_per_run_with_every_field(
        self, conformance: Conformance, conformance_capabilities: Capabilities
    ) -> None:
        built = conformance.build()
        code = "print('hello')"
        result = built.sandbox.run(code, feature="notebook", env={"MODE": "x"})
        [event] = built.events
        assert (event.id, event.kind, event.driver, event.feature, event.tenant) == (
            result.id,
            "run",
            conformance.driver_id,
            "notebook",
            "default",
        )
        assert (event.code_sha256, event.language, event.isolation) == (
            code_sha256(code),
            "python",
            conformance_capabilities.isolation,
        )
        assert (event.duration, event.exit_code, event.stop, event.error, event.cost) == (
            result.duration,
            0,
            None,
            None,
            result.cost,
        )
        assert (event.hosts, event.hosts_refused, event.env_names, event.session_id) == ((), (), ("MODE",), None)
        assert datetime.fromisoformat(event.time).tzinfo is not None
        json.dumps(event.to_dict())  # JSON-able, for any sink

    def test_the_event_holds_no_code_output_or_secret_value(self, conformance: Conformance) -> None:
        built = conformance.build()
        code = "import os\nprint('visible-output-text', os.environ['K'])  # code-comment-text"
        built.sandbox.run(code, env={"K": secret(SECRET)})
        [event] = built.events
        assert event.env_names == ("K",)
        text = json.dumps(event.to_dict())
        for leaked in ("visible-output-text", "code-comment-text", SECRET_VALUES[SECRET]):
            assert leaked not in text
        assert all("visible-output-text" not in s for s in iter_strings(event))

    def test_a_stopped_run_is_audited_with_its_stop(self, conformance: Conformance) -> None:
        built = conformance.build()
        result = built.sandbox.run("while True: pass", limits={"timeout": "1s"})
        [event] = built.events
        assert (event.kind, event.stop, event.exit_code, event.duration) == ("run", "timeout", None, result.duration)

    def test_a_refused_call_is_audited_with_its_code(self, conformance: Conformance) -> None:
        built = conformance.build()
        with pytest.raises(SandboxError) as caught:
            built.sandbox.run("print(1)", "cobol", feature="notebook")
        assert caught.value.code == INVALID_OPTION
        [event] = built.events
        assert (event.kind, event.error, event.feature, event.code_sha256) == (
            "refused",
            INVALID_OPTION,
            "notebook",
            code_sha256("print(1)"),
        )
        assert built.started == []
