"""No secrets or app values unless named: a secret reaches a run only when listed and passed by name."""

from __future__ import annotations

import hashlib
import json

from mainsdk import secret
from mainsdk.errors import SECRET_NOT_ALLOWED

from mainsdk_conformance.suite._helpers import refused
from mainsdk_conformance.target import OTHER_SECRET, SECRET, SECRET_VALUES, UNSET_SECRET, Conformance, iter_strings


class TestSecrets:
    """Secrets under sandbox.secrets, given by secret(name), and nothing else."""

    def test_a_named_secret_reaches_the_run_and_no_other(self, conformance: Conformance) -> None:
        built = conformance.build()
        code = (
            "import hashlib, json, os\n"
            "print(hashlib.sha256(os.environ['K'].encode()).hexdigest(), json.dumps(sorted(os.environ)))"
        )
        result = built.sandbox.run(code, env={"K": secret(SECRET), "MODE": "plain"})
        digest, names = result.stdout.split(" ", 1)
        assert digest == hashlib.sha256(SECRET_VALUES[SECRET].encode()).hexdigest()
        assert {"K", "MODE"} <= set(json.loads(names)) and OTHER_SECRET not in names
        assert all(SECRET_VALUES[SECRET] not in text for text in iter_strings([e.to_dict() for e in built.events]))

    def test_a_secret_not_listed_is_refused_and_nothing_runs(self, conformance: Conformance) -> None:
        built = conformance.build()
        error = refused(
            built, lambda: built.sandbox.run("print(1)", env={"K": secret("NOT_LISTED")}), SECRET_NOT_ALLOWED
        )
        assert error.status == 403 and "sandbox.secrets" in error.message

    def test_a_listed_secret_without_a_value_is_refused(self, conformance: Conformance) -> None:
        built = conformance.build()
        refused(built, lambda: built.sandbox.run("print(1)", env={"K": secret(UNSET_SECRET)}), SECRET_NOT_ALLOWED)
