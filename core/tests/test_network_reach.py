"""``NetworkReach``: where a driver's host filtering holds, and the extra reach that goes into the audit event."""

from __future__ import annotations

from mainsdk.audit import AuditEvent
from mainsdk.driver import Capabilities, NetworkReach, extra_reach

E2B_LIKE = NetworkReach(filtered=(("http", 80), ("https", 443)), extra=("dns:8.8.8.8:53",))
PROXY_LIKE = NetworkReach(filtered=(("http", None), ("https", None)))


def test_filters_holds_only_on_the_declared_schemes_and_ports() -> None:
    assert E2B_LIKE.filters("https", 443) and E2B_LIKE.filters("http", 80)
    assert not E2B_LIKE.filters("http", 443) and not E2B_LIKE.filters("https", 8443)
    assert not E2B_LIKE.filters("http", 8080)
    assert PROXY_LIKE.filters("https", 8443) and PROXY_LIKE.filters("http", 1)


def test_extra_reach_is_recorded_only_for_a_run_that_names_hosts() -> None:
    caps = Capabilities(isolation="microvm", network=True, network_reach=E2B_LIKE)
    assert extra_reach(caps, ("pypi.org",)) == ("dns:8.8.8.8:53",)
    assert extra_reach(caps, ()) == ()
    assert extra_reach(Capabilities(isolation="microvm"), ("pypi.org",)) == ()
    event = AuditEvent(id="r", kind="run", driver="e2b", feature=None, tenant="t", extra_reach=("dns:8.8.8.8:53",))
    assert event.to_dict()["extra_reach"] == ["dns:8.8.8.8:53"]


def test_no_driver_declares_reach_unless_it_says_so() -> None:
    assert Capabilities(isolation="weak").network_reach is None
