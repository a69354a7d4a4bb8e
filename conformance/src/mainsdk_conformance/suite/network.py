"""No network unless allowed, never wider than network.allow: no hosts, one host, a wildcard."""

from __future__ import annotations

import functools
import socket

from mainsdk import Capabilities
from mainsdk.errors import HOST_NOT_ALLOWED, INVALID_OPTION

from mainsdk_conformance.marks import requires
from mainsdk_conformance.suite._helpers import reach_code, refused
from mainsdk_conformance.target import Conformance


class TestNetwork:
    """A run reaches only the hosts it was given, each in both sandbox.network and network.allow."""

    def test_a_host_must_be_in_sandbox_network_and_network_allow(self, conformance: Conformance) -> None:
        built = conformance.build({"sandbox": {"network": ["only-sandbox.example"]}, "network": {"allow": []}})
        error = refused(
            built, lambda: built.sandbox.run("print(1)", network=["only-sandbox.example"]), HOST_NOT_ALLOWED
        )
        assert "network.allow" in error.message and error.status == 403
        error = refused(built, lambda: built.sandbox.run("print(1)", network=["nowhere.example"]), HOST_NOT_ALLOWED)
        assert "sandbox.network" in error.message

    def test_one_host(
        self, conformance: Conformance, conformance_capabilities: Capabilities, conformance_origin_port: int
    ) -> None:
        hosts = conformance.target.hosts
        built = conformance.build()
        if not conformance_capabilities.network:
            # A driver that cannot give hosts refuses them: nothing runs with less than was asked, or more.
            error = refused(built, lambda: built.sandbox.run("print(1)", network=[hosts.allowed]), HOST_NOT_ALLOWED)
            assert "cannot give a run network access" in error.message
            return
        code = reach_code([hosts.allowed, hosts.denied], conformance_origin_port)
        result = built.sandbox.run(code, network=[hosts.allowed])
        assert result.stdout == f"{hosts.allowed} reached\n{hosts.denied} refused\n"
        [event] = built.events
        assert event.hosts == (hosts.allowed,)
        assert [spec.hosts for spec in built.started] == [(hosts.allowed,)]

    def test_a_wildcard_host(
        self, conformance: Conformance, conformance_capabilities: Capabilities, conformance_origin_port: int
    ) -> None:
        hosts = conformance.target.hosts
        built = conformance.build()
        code = reach_code([hosts.under_wildcard, hosts.denied], conformance_origin_port)
        run = functools.partial(built.sandbox.run, code, network=[hosts.wildcard])
        if not conformance_capabilities.network:
            refused(built, run, HOST_NOT_ALLOWED)
            return
        if not conformance_capabilities.wildcard_hosts:
            error = refused(built, run, INVALID_OPTION)
            assert "wildcard" in error.message
            return
        assert run().stdout == f"{hosts.under_wildcard} reached\n{hosts.denied} refused\n"

    def test_no_host_is_reachable_without_network(self, conformance: Conformance, conformance_origin_port: int) -> None:
        # By name and by the origin's own address: with no hosts given, neither answers.
        probes = [conformance.target.hosts.allowed, "127.0.0.1"]
        result = conformance.sandbox().run(reach_code(probes, conformance_origin_port))
        assert result.stdout == "".join(f"{probe} refused\n" for probe in probes)

    @requires("live")
    def test_the_apps_host_is_unreachable(self, conformance: Conformance) -> None:
        # Live only: the port is random, so the code differs on every run.
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            code = (
                "import socket\ns = socket.socket(); s.settimeout(3)\n"
                f"try:\n    s.connect(('127.0.0.1', {port})); print('connected')\n"
                "except OSError:\n    print('unreachable')\n"
            )
            assert conformance.sandbox().run(code).stdout == "unreachable\n"
