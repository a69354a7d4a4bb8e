"""No network unless allowed, never wider than network.allow: no hosts, one host, a wildcard.

A driver that gives hosts declares where its host filtering holds
(``Capabilities.network_reach``): on which schemes and ports a named host is
reached by name, and what it opens beyond the hosts (E2B's nameserver). The
tests reach the suite's origin exactly there (HTTPS on 443 at least), check
that a port outside the declaration is refused even for a given host, and that
the run's audit event records the extra reach.
"""

from __future__ import annotations

import functools
import socket

import pytest
from mainsdk import Capabilities, NetworkReach
from mainsdk.driver import Scheme
from mainsdk.errors import HOST_NOT_ALLOWED, INVALID_OPTION

from mainsdk_conformance.marks import requires
from mainsdk_conformance.suite._helpers import reach_code, refused
from mainsdk_conformance.target import Conformance

# Ports no driver here filters by name, for the "outside the declaration" probe.
UNFILTERED: tuple[tuple[Scheme, int], ...] = (("http", 8080), ("https", 8443))


def _declared(caps: Capabilities, driver_id: str) -> NetworkReach:
    """The driver's declared reach; a driver that gives hosts without declaring it has its reach tests skipped."""
    if caps.network_reach is None:
        pytest.skip(f"driver {driver_id} gives hosts but declares no network_reach (where its host filtering holds)")
    reach = caps.network_reach
    assert reach.filters("https", 443), f"driver {driver_id} gives hosts but does not filter HTTPS on port 443"
    return reach


def _probes(reach: NetworkReach, conformance: Conformance, http_port: int, tls_port: int) -> list[tuple[Scheme, int]]:
    """Where to reach the origin: each declared (scheme, port); any port is the origin's own.

    A live driver that filters only fixed ports would need the origin on them
    (443 is privileged and shared): the suite does not bind those, and says so.
    """
    probes: list[tuple[Scheme, int]] = []
    for scheme, port in reach.filtered:
        if port is None:
            probes.append((scheme, http_port if scheme == "http" else tls_port))
        elif conformance.replayed:
            probes.append((scheme, port))
        else:
            pytest.skip(f"the suite's origin cannot listen on {scheme} port {port} on this machine")
    return probes


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
        self,
        conformance: Conformance,
        conformance_capabilities: Capabilities,
        conformance_origin_port: int,
        conformance_tls_origin_port: int,
    ) -> None:
        hosts = conformance.target.hosts
        built = conformance.build()
        if not conformance_capabilities.network:
            # A driver that cannot give hosts refuses them: nothing runs with less than was asked, or more.
            error = refused(built, lambda: built.sandbox.run("print(1)", network=[hosts.allowed]), HOST_NOT_ALLOWED)
            assert "cannot give a run network access" in error.message
            return
        reach = _declared(conformance_capabilities, conformance.driver_id)
        for scheme, port in _probes(reach, conformance, conformance_origin_port, conformance_tls_origin_port):
            code = reach_code([hosts.allowed, hosts.denied], port, scheme)
            result = built.sandbox.run(code, network=[hosts.allowed])
            assert result.stdout == f"{hosts.allowed} reached\n{hosts.denied} refused\n", (scheme, port)
        assert {event.hosts for event in built.events} == {(hosts.allowed,)}
        # The reach opened beyond the hosts (E2B's nameserver) is on record in every run that named hosts.
        assert {event.extra_reach for event in built.events} == {reach.extra}
        assert {spec.hosts for spec in built.started} == {(hosts.allowed,)}

    def test_a_given_host_is_refused_where_the_driver_does_not_filter(
        self, conformance: Conformance, conformance_capabilities: Capabilities
    ) -> None:
        if not conformance_capabilities.network:
            pytest.skip(f"driver {conformance.driver_id} gives no hosts")
        reach = _declared(conformance_capabilities, conformance.driver_id)
        outside = [(scheme, port) for scheme, port in UNFILTERED if not reach.filters(scheme, port)]
        if not outside:
            pytest.skip(f"driver {conformance.driver_id} filters host names on every port")
        if not conformance.replayed:
            pytest.skip("live, nothing but the suite's origin may answer; its port is random, so always filtered")
        hosts = conformance.target.hosts
        sandbox = conformance.sandbox()
        for scheme, port in outside:
            # Not in the declaration: even the given host is not reached by name there (E2B: CIDR rules only).
            result = sandbox.run(reach_code([hosts.allowed], port, scheme), network=[hosts.allowed])
            assert result.stdout == f"{hosts.allowed} refused\n", (scheme, port)

    def test_a_wildcard_host(
        self,
        conformance: Conformance,
        conformance_capabilities: Capabilities,
        conformance_origin_port: int,
        conformance_tls_origin_port: int,
    ) -> None:
        hosts = conformance.target.hosts
        built = conformance.build()
        if not conformance_capabilities.network:
            code = reach_code([hosts.under_wildcard, hosts.denied], conformance_origin_port)
            refused(built, functools.partial(built.sandbox.run, code, network=[hosts.wildcard]), HOST_NOT_ALLOWED)
            return
        if not conformance_capabilities.wildcard_hosts:
            code = reach_code([hosts.under_wildcard, hosts.denied], conformance_origin_port)
            error = refused(built, functools.partial(built.sandbox.run, code, network=[hosts.wildcard]), INVALID_OPTION)
            assert "wildcard" in error.message
            return
        reach = _declared(conformance_capabilities, conformance.driver_id)
        probes = _probes(reach, conformance, conformance_origin_port, conformance_tls_origin_port)
        scheme, port = next(probe for probe in probes if probe[0] == "https")
        code = reach_code([hosts.under_wildcard, hosts.denied], port, scheme)
        result = built.sandbox.run(code, network=[hosts.wildcard])
        assert result.stdout == f"{hosts.under_wildcard} reached\n{hosts.denied} refused\n"

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
