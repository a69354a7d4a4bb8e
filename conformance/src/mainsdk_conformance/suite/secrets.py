"""No secrets or app values unless named: a secret reaches a run only when listed and passed by name.

A driver declaring ``Capabilities.egress_headers`` also sets ``egress`` headers at its egress: the allowed TLS
origin receives the header (the code's own header of that name replaced), another host never does, and the
code cannot read the value from its environment, its files or any process it can see.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from mainsdk import Capabilities, secret
from mainsdk.errors import SECRET_NOT_ALLOWED

from mainsdk_conformance.marks import LIVE, requires, requires_cells_language
from mainsdk_conformance.suite._helpers import CLIENTS, ORIGIN_BODY, client_lines, clients_code, refused
from mainsdk_conformance.target import (
    EGRESS_ORIGIN_CA,
    OTHER_SECRET,
    SECRET,
    SECRET_VALUES,
    UNSET_SECRET,
    Conformance,
    iter_strings,
)

EGRESS_HEADER = "X-Conformance-Key"
# The clients no image need have: a driver that declares packages gets them as code would (``sandbox.packages``).
CLIENT_PACKAGES = {"requests": "requests==2.32.3", "httpx": "httpx==0.28.1", "pip": "pip==24.3.1"}


def _egress(host: str) -> dict[str, Any]:
    return {host: {"headers": {EGRESS_HEADER: secret(SECRET)}}}


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

    @requires("egress_headers", LIVE)
    def test_egress_headers_reach_the_allowed_tls_origin_and_no_other_host(
        self, conformance: Conformance, conformance_egress_origin: Any
    ) -> None:
        hosts = conformance.target.hosts
        built = conformance.build()
        port = conformance_egress_origin.port
        # The code trusts its box's own store, plus the suite's origin CA for the host that stays a blind tunnel;
        # it sends the header itself too, under another case: the egress replaces it, never merges.
        code = (
            "import ssl, urllib.request\n"
            f"context = ssl.create_default_context(); context.load_verify_locations(cadata={EGRESS_ORIGIN_CA!r})\n"
            f"for host in ({hosts.allowed!r}, {hosts.under_wildcard!r}):\n"
            f"    url, mine = f'https://{{host}}:{port}/', {{'x-conformance-key': 'mine'}}\n"
            "    request = urllib.request.Request(url, headers=mine)\n"
            "    body = urllib.request.urlopen(request, timeout=10, context=context).read()\n"
            f"    print(host, 'reached' if body == {ORIGIN_BODY!r} else 'refused')\n"
        )
        result = built.sandbox.run(
            code, network=[hosts.allowed, hosts.wildcard], egress=_egress(hosts.allowed), limits={"timeout": "10s"}
        )
        assert result.stdout == f"{hosts.allowed} reached\n{hosts.under_wildcard} reached\n", result.stderr
        assert conformance_egress_origin.values(hosts.allowed, EGRESS_HEADER) == [[SECRET_VALUES[SECRET]]]
        assert conformance_egress_origin.values(hosts.under_wildcard, EGRESS_HEADER) == [["mine"]]
        run = [e for e in built.events if e.kind == "run"]
        assert [e.egress for e in run] == [((hosts.allowed, EGRESS_HEADER, SECRET),)]
        assert all(SECRET_VALUES[SECRET] not in text for text in iter_strings([e.to_dict() for e in built.events]))

    @requires("egress_headers", LIVE)
    @pytest.mark.parametrize("client", CLIENTS)
    def test_every_client_of_the_box_gets_the_egress_header_trusting_only_the_box(
        self,
        conformance: Conformance,
        conformance_egress_origin: Any,
        conformance_capabilities: Capabilities,
        client: str,
    ) -> None:
        # An egress that ends TLS to set the header must make every common client trust it: curl and urllib read
        # the system's bundle, requests and httpx certifi's, node its own store (issue 31: E2B's CA was in the
        # system bundle only). The code trusts nothing more than its box; its own header of that name is replaced.
        why = conformance.target.absent_clients.get(client)
        if why is not None:
            pytest.skip(f"driver {conformance.driver_id}'s box has no {client}: {why}")
        hosts = conformance.target.hosts
        pin = CLIENT_PACKAGES.get(client) if conformance_capabilities.packages else None
        built = conformance.build({"sandbox": {"packages": {"python": [pin]}}} if pin else None)
        url = f"https://{hosts.allowed}:{conformance_egress_origin.port}/"
        code = clients_code(url, [client], {"x-conformance-key": "mine"})
        result = built.sandbox.run(code, network=[hosts.allowed], egress=_egress(hosts.allowed))
        # pip reads the origin's answer as an index page it will not take (no Content-Type): reached all the same.
        reached = f"200 {ORIGIN_BODY.decode()}" if client != "pip" else "reached an index page"
        assert client_lines(result.stdout) == {client: reached}, result.stdout + result.stderr
        assert conformance_egress_origin.values(hosts.allowed, EGRESS_HEADER) == [[SECRET_VALUES[SECRET]]]
        assert SECRET_VALUES[SECRET] not in result.stdout + result.stderr

    @requires("egress_headers", LIVE)
    @requires_cells_language("javascript")
    def test_a_javascript_cell_of_a_session_with_egress_gets_the_header_trusting_only_the_box(
        self, conformance: Conformance, conformance_egress_origin: Any
    ) -> None:
        # The cells' kernel starts as one of the session's commands: node in it must trust the egress too.
        hosts = conformance.target.hosts
        url = f"https://{hosts.allowed}:{conformance_egress_origin.port}/"
        code = f"const answer = await fetch({url!r});\nconsole.log(answer.status, await answer.text());"
        with conformance.sandbox().create(network=[hosts.allowed], egress=_egress(hosts.allowed)) as session:
            cell = session.run_code(code, language="javascript")
        assert (cell.error, cell.stdout) == (None, f"200 {ORIGIN_BODY.decode()}\n")
        assert conformance_egress_origin.values(hosts.allowed, EGRESS_HEADER) == [[SECRET_VALUES[SECRET]]]

    @requires("egress_headers")
    def test_egress_header_values_are_not_in_the_box(self, conformance: Conformance) -> None:
        hosts = conformance.target.hosts
        built = conformance.build()
        value = SECRET_VALUES[SECRET].encode()
        # The value's hex in the code, not the value: the code itself is in a process's cmdline.
        code = (
            "import os\n"
            f"needle = bytes.fromhex({value.hex()!r})\n"
            "hits, read = [], 0\n"
            "if needle in repr(dict(os.environ)).encode(): hits.append('env')\n"
            "def scan(path):\n"
            "    global read\n"
            "    try:\n"
            "        with open(path, 'rb') as f: data = f.read(1 << 22)\n"
            "    except OSError: return\n"
            "    read += 1\n"
            "    if needle in data: hits.append(path.encode().hex())\n"
            "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
            "    for name in ('environ', 'cmdline'): scan(f'/proc/{pid}/{name}')\n"
            "for top in {os.getcwd(), os.path.expanduser('~'), '/tmp'}:\n"
            "    for folder, _, names in os.walk(top):\n"
            "        for n in names[:500]: scan(os.path.join(folder, n))\n"
            "print(read > 0, hits)\n"
        )
        result = built.sandbox.run(code, network=[hosts.allowed], egress=_egress(hosts.allowed))
        assert result.stdout == "True []\n", result.stderr
