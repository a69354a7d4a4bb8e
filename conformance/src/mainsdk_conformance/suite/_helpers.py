"""Helpers the suite's tests share. Public API only: what an app could do, plus the start spy."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from mainsdk import SandboxError

from mainsdk_conformance.target import Built

# A made-up GitHub token: it has a known key format, so output holding it must come back redacted. The code
# builds it from pieces, so only the output holds it; cassettes may hold it (mainsdk_conformance.cassette).
FAKE_KEY = "ghp_" + "conformanceFAKEkey" + "0" * 18
FAKE_KEY_CODE = "print('gh' + 'p_' + 'conformanceFAKEkey' + '0' * 18)"
REDACTED = "[redacted:secret]"
# Core cancels a command this long past its timeout if the driver has not stopped it (mainsdk.limits).
DEADLINE_GRACE = 5.0


def refused(built: Built, call: Callable[[], Any], code: str) -> SandboxError:
    """Assert that ``call`` raises ``code``, starts no box and is audited as one refused event."""
    before = len(built.events)
    with pytest.raises(SandboxError) as caught:
        call()
    assert caught.value.code == code, caught.value
    assert built.started == [], "a refused call started a box"
    assert [(e.kind, e.error) for e in built.events[before:]] == [("refused", code)]
    return caught.value


# What the suite's loopback origin answers, so "reached" means reached it and nothing else.
ORIGIN_BODY = b"conformance origin"


def reach_code(hosts: Sequence[str], port: int, scheme: str = "http") -> str:
    """Python that fetches ``scheme://host:port/`` from each host and prints one line each.

    urllib, so a driver that gives hosts through a proxy in the box's environment
    is reached the way code normally reaches the network. Only the suite's own
    origin's answer counts as reached: a proxy's refusal (403), a failed name
    lookup or a closed port are all "refused". Over https the origin's
    certificate is a throwaway one: the test is about reach, not trust.
    """
    if scheme == "http":
        fetch = f"urllib.request.urlopen(f'http://{{host}}:{port}/', timeout=5)"
        imports = "import urllib.request\n"
    else:
        fetch = f"urllib.request.urlopen(f'{scheme}://{{host}}:{port}/', timeout=5, context=context)"
        imports = "import ssl, urllib.request\ncontext = ssl._create_unverified_context()\n"
    return (
        imports + f"for host in {json.dumps(list(hosts))}:\n"
        "    try:\n"
        f"        body = {fetch}.read()\n"
        f"        print(host, 'reached' if body == {ORIGIN_BODY!r} else 'refused')\n"
        "    except Exception:\n"
        "        print(host, 'refused')\n"
    )
