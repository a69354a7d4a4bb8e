"""An authoring stand-in for E2B, written from the SDK's source (e2b 2.63.0) and E2B's documented wire.

Not a test double: it exists to author cassettes when no E2B account is at hand, and it serves the few tests
of a rule no cassette can hold (``tests/stand_in.py``: a link's bandwidth, the end each lifetime call sets, the
rules each API release takes), none of which runs a command. Authoring: ``author.py`` runs the conformance
tests in record mode with the recorder forwarding here instead of to E2B, so every request in
a cassette is exactly what the real SDK sent, and every answer is shaped as
envd and the control plane shape theirs (Connect JSON envelopes, multipart
upload, ListDir entries). Commands really run, on this host, in a folder
standing in for ``/home/user`` of the sandbox (and ``/opt/mainsdk``, bound
at its path in a mount namespace of each command's); a few answers (network,
files of the host) are then corrected by hand in the cassettes, and say so.

Process semantics follow envd (e2b-dev/infra ``packages/envd``), never kinder:
- a command is ``cmd`` + ``args`` as sent, in no process group of its own
  (``handler.go`` sets only credentials in ``SysProcAttr``);
- ``SendSignal`` signals that one pid (``handler.go`` ``SendSignal``:
  ``cmd.Process.Signal``) and stops streaming its output (``outCancel``);
- a ``Start`` whose client went away does not kill the process (``start.go``:
  "We do not want the command to be killed if the request context is
  cancelled"); only ``Connect-Timeout-Ms`` does, again one pid
  (``exec.CommandContext``);
- a quiet stream gets ``keepalive`` events every ``Keepalive-Ping-Interval``
  seconds (``permissions/keepalive.go``), the ``end`` event carries ``error``
  ("exit status 3", "signal: killed"), and zero values are left out, as
  protojson does;
- a sandbox it does not know is E2B's proxy answer, 502 "The sandbox was not
  found" (``packages/shared/pkg/proxy/template/sandbox_not_found.go``);
- a sandbox ends at its end time (its streams break), and that end never passes
  its start + the team's maximum (``FAKE_E2B_MAX_LENGTH_HOURS``, default 1, the
  Base plan's): a create asking more is a 400 (``handlers/timeout_helper.go``), a
  ``POST /sandboxes/{id}/timeout`` is silently cut at the cap, and past it a 400
  "Max instance length exceeded" (``orchestrator/keep_alive.go``);
- ``/timeout`` sets the end to now + asked even when sooner (``sandbox_timeout.go``,
  ``KeepAliveFor(allowShorter=true)``); ``/refreshes`` never moves it sooner (``sandbox_refresh.go``,
  ``allowShorter=false``: ``ErrCannotShortenTTL`` is a 204 that changes nothing), and asks at least 15 s;
- with ``STATE.uplink`` / ``STATE.downlink`` (``FAKE_E2B_UPLINK``, ``FAKE_E2B_DOWNLINK``, bytes a second) an
  upload's body comes, and a file's goes, no faster: a client's whole-request deadline meets a real link.
The control plane keeps each sandbox's ``metadata`` and lists by it
(``GET /v2/sandboxes?metadata=``, spec/openapi.yml). It checks a create's
``Idempotency-Key`` as the API's middleware does (one value, 1 to 255 of
``a-z0-9``, else 400) but does not replay by it: that needs the route's flag on. With
``FAKE_E2B_CREATE_502=N`` the first N creates make their sandbox and then
answer 502, as a gateway that lost the answer would.

A create with ``network.rules`` gets E2B's egress proxy for their hosts (``fake_egress.py``): TLS ended with a CA
envd appends to the system bundle only, so a client that keeps its own store fails as it does on E2B.

Run: python fake_e2b.py  (prints the two base URLs, api and sandbox)
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import itertools
import json
import os
import queue
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "conformance" / "src"))
from mainsdk_conformance.cassette import parse_multipart
from mainsdk_conformance.profiles import E2B

sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:
    from fake_egress import Egress

ENVD_VERSION = "0.6.13"  # packages/envd/pkg/version.go
STD_CHUNK_SIZE = 32 << 10  # packages/envd/internal/services/process/handler/handler.go stdChunkSize
HOME = "/home/user"
OPT_MOUNT = 'mount -t tmpfs none /opt && mkdir /opt/mainsdk && mount --bind "$1" /opt/mainsdk && shift && exec "$@"'


class Box:
    """One sandbox: a folder standing in for its filesystem, and its running processes."""

    def __init__(self, sandbox_id: str, template: str, metadata: dict[str, str], timeout: float) -> None:
        self.id = sandbox_id
        self.template = template
        self.metadata = metadata
        # sandbox.Sandbox's StartTime and EndTime: the orchestrator ends it at its end; the end never passes
        # start + the team's MaxInstanceLength (store.go Add, keep_alive.go).
        self.start = time.time()
        self.end = self.start + min(timeout, STATE.max_length)
        self.evicted = threading.Event()
        self.state = "running"  # or "paused" (POST /sandboxes/{id}/pause)
        self.root = Path(tempfile.mkdtemp(prefix=f"fake-e2b-{sandbox_id}-"))
        (self.root / "home/user").mkdir(parents=True)
        (self.root / "tmp").mkdir()
        (self.root / "opt/mainsdk").mkdir(parents=True)
        self.procs: dict[int, Proc] = {}
        self.egress: Egress | None = None  # E2B's proxy for the create's network.rules, when it had some
        self.rules: dict[str, Any] = {}
        self.number = 0

    def proxy(self) -> Egress | None:
        """E2B's egress proxy for the create's network.rules (made at the first command), or None without rules."""
        if self.rules and self.egress is None:
            from fake_egress import Egress  # its TLS needs cryptography, which a create alone does not

            self.egress = Egress(self.root, self.number, self.rules)
        return self.egress

    def listed(self) -> dict[str, Any]:
        """The sandbox as ``GET /v2/sandboxes`` lists it (ListedSandbox in spec/openapi.yml)."""
        return {
            "templateID": self.template,
            "alias": "base",
            "sandboxID": self.id,
            "clientID": "6532622b",
            "startedAt": _iso(self.start),
            "endAt": _iso(self.end),
            "cpuCount": 2,
            "memoryMB": 512,
            "diskSizeMB": 512,
            "metadata": self.metadata,
            "state": self.state,
            "envdVersion": ENVD_VERSION,
        }

    def map(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def rewrite(self, line: str) -> str:
        # One pass: the stand-in root itself lives under /tmp.
        return re.sub(r"/home/user|/tmp/", lambda m: f"{self.root}{m.group(0)}", line)

    def kill(self) -> None:
        # The whole VM goes: every process it ran, whatever its group (the stand-in finds them by its root folder).
        for proc in self.procs.values():
            with contextlib.suppress(OSError):
                os.kill(proc.popen.pid, signal.SIGKILL)
        kill_under(self.root)
        if self.egress is not None:
            self.egress.close()
        shutil.rmtree(self.root, ignore_errors=True)


class Proc:
    """One process envd started: the process, whether its output still streams, and its stdin pipe (or None)."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.out_cancelled = threading.Event()
        # handler.go: a pipe unless the Start said stdin false (then /dev/null); CloseStdin sets it to nil.
        self.stdin = popen.stdin
        self.stdin_lock = threading.Lock()


def kill_under(root: Path) -> None:
    """SIGKILL every process whose working folder is under ``root``: the sandbox's processes, on the host."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if str(root) in os.readlink(entry / "cwd"):
                os.kill(int(entry.name), signal.SIGKILL)


class State:
    def __init__(self) -> None:
        self.boxes: dict[str, Box] = {}
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.creates_to_fail = int(os.environ.get("FAKE_E2B_CREATE_502", "0"))
        # The team's limits.MaxLengthHours (1 on Base/Hobby, 24 on Pro), as seconds.
        self.max_hours = int(os.environ.get("FAKE_E2B_MAX_LENGTH_HOURS", "1"))
        self.max_length = 3600.0 * self.max_hours
        # Snapshots (POST /sandboxes/{id}/snapshots): each a copy of its sandbox's files, a template by its id.
        self.templates: dict[str, Path] = {}
        self.snapshot_ids = itertools.count(1)
        # The API's release (its rules for network.rules, network_problem) and the team's domain limit there.
        self.release = tuple(int(part) for part in os.environ.get("FAKE_E2B_API_RELEASE", "2026.30").split("."))
        self.max_rule_domains = int(os.environ.get("FAKE_E2B_MAX_RULE_DOMAINS", "10"))
        # The link between the client and envd, in bytes per second each way (0: as fast as loopback): an
        # upload's body is read, and a file's is sent, no faster (FAKE_E2B_UPLINK, FAKE_E2B_DOWNLINK).
        self.uplink = int(os.environ.get("FAKE_E2B_UPLINK", "0"))
        self.downlink = int(os.environ.get("FAKE_E2B_DOWNLINK", "0"))

    def evict(self) -> None:
        """End every sandbox past its end time, as the orchestrator's evictor does; its streams just break."""
        now = time.time()
        with self.lock:
            # A paused sandbox is kept (as its snapshot) until resumed or killed: it has no end then.
            ended = [box for box in self.boxes.values() if box.end <= now and box.state == "running"]
            for box in ended:
                self.boxes.pop(box.id, None)
        for box in ended:
            box.evicted.set()
            box.kill()


# The API's limits on a create's network.rules (e2b-dev/infra packages/api/internal/handlers/sandbox_create.go).
MAX_RULE_DOMAINS = 10
MAX_TRANSFORMS_PER_DOMAIN = 1
MAX_RULE_DOMAIN_LEN = 128
MAX_HEADER_NAME_LEN = 64
MAX_HEADER_VALUE_LEN = 2048
MAX_HEADERS_PER_RULE = 20
MAX_MARKER_NAMES = 32  # packages/shared/pkg/networktransform/placeholders.go MaxMarkerNames
MIN_ENVD_FOR_RULES = (0, 5, 13)  # sandbox_create.go minEnvdVersionForNetworkRules
ALL_TRAFFIC = "0.0.0.0/0"  # packages/shared/pkg/sandbox-network/firewall.go AllInternetTrafficCIDR
DOMAINS_NEED_BLOCK_ALL = (
    "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all "
    "other traffic."
)
# github.com/asaskevich/govalidator patterns.go DNSName, which IsDNSName matches (after refusing "", an IP and
# more than 255 characters without the dots): no "*", so a wildcard has no rules.
_DNS_NAME = re.compile(r"([a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})(\.[a-zA-Z0-9_][a-zA-Z0-9_-]{0,62})*[._]?")
# golang.org/x/net/http/httpguts ValidHeaderFieldName: one or more RFC 7230 token characters.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# networktransform/placeholders.go: the two prefixes a header value's placeholders start with.
_PLACEHOLDER_PREFIXES = ("${e2b.identity.tokens.", "${e2b.secrets.")
# secretsstore/name.go NormalizeName: 1 to 128 bytes of [A-Za-z0-9_-] once trimmed, not starting "sec_"
# (id.SecretIDPrefix).
_SECRET_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")


def _is_ip_or_cidr(text: str) -> bool:
    """sandbox-network/firewall.go IsIPOrCIDR: Go's net.ParseIP or net.ParseCIDR accepts it."""
    import ipaddress

    try:
        if "/" in text:
            ipaddress.ip_network(text, strict=False)
        else:
            ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_specified(text: str) -> bool:
    """firewall.go IsSpecifiedIPOrCIDR: an IP or CIDR whose address is not 0.0.0.0 / ::, save 0.0.0.0/0 itself."""
    import ipaddress

    if not _is_ip_or_cidr(text):
        return False
    if text == ALL_TRAFFIC:
        return True
    address = text.split("/", 1)[0]
    return not ipaddress.ip_address(address).is_unspecified


# The release from which rule domains may be wildcards and the domain limit is the team's flag (e2b-dev/runtime
# sandbox_create.go validateNetworkRules at 2875315b; tag 2026.29 still had the constant and DNS names only).
WILDCARD_RELEASE = (2026, 30)
# sandbox-network's IsValidWildcardDomainPattern, as its tests (sandbox_network_test.go) hold it: "*." and DNS
# labels, no other "*", no final dot, at most 253 characters.
_WILDCARD_PATTERN = re.compile(r"\*(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+")


def _is_wildcard_pattern(text: str) -> bool:
    return len(text) <= 253 and _WILDCARD_PATTERN.fullmatch(text) is not None


def _is_dns_name(text: str) -> bool:
    """govalidator IsDNSName."""
    if not text or len(text.replace(".", "")) > 255 or (_is_ip_or_cidr(text) and "/" not in text):
        return False
    return _DNS_NAME.fullmatch(text) is not None


def _valid_header_value(value: str) -> bool:
    """httpguts ValidHeaderFieldValue: no control byte but space and tab (obs-text, bytes >= 0x80, allowed)."""
    return all(not (ord(c) < 0x20 or ord(c) == 0x7F) or c in " \t" for c in value)


def _placeholders(value: str) -> list[tuple[str, str]] | None:
    """networktransform.ParsePlaceholders: (prefix, name) of each placeholder, left to right; None if malformed."""
    found: list[tuple[str, str]] = []
    cursor = 0
    while cursor < len(value):
        starts = [(value.find(p, cursor), p) for p in _PLACEHOLDER_PREFIXES if value.find(p, cursor) >= 0]
        if not starts:
            return found
        start, prefix = min(starts)
        name_start = start + len(prefix)
        end = value.find("}", name_start)
        if end < 0:
            return None
        name = value[name_start:end]
        if not name or any(p in name for p in _PLACEHOLDER_PREFIXES):
            return None
        if prefix == "${e2b.secrets.":
            trimmed = name.strip()
            if _SECRET_NAME.fullmatch(trimmed) is None or trimmed.lower().startswith("sec_"):
                return None
            name = trimmed.lower()
        found.append((prefix, name))
        cursor = end + 1
    return found


def network_problem(network: Any, envd_version: str) -> str | None:
    """What E2B's API answers (400, ``message``) to a create's ``network``, or None when it takes it.

    handlers/sandbox_create.go ``validateNetworkConfig``: ``validateEgressRules`` (denyOut only IPs and CIDRs;
    allowOut's addresses specified; domains in allowOut need 0.0.0.0/0 in denyOut), then
    ``validateNetworkRules`` in its order: the team's ``network-transform-rules`` flag (off by default outside
    development, featureflags/flags.go; ``FAKE_E2B_TRANSFORM_RULES=0`` stands for a team without it), envd at
    least 0.5.13, at most 10 domains, each a DNS name of at most 128 characters with at most 1 rule, at most 20
    headers a rule, each name a token of at most 64 characters, each value of valid characters, at most 2048
    long, its ``${e2b.…}`` placeholders well formed, at most 32 secret names a domain. Lengths are Go's: bytes.

    By the API's release (``STATE.release``, ``FAKE_E2B_API_RELEASE``): from 2026.30 (e2b-dev/runtime
    ``sandbox_create.go`` at 2875315b, the default here) the number of domains is the team's
    ``max-network-rule-domains`` flag (``STATE.max_rule_domains``, ``FAKE_E2B_MAX_RULE_DOMAINS``, default 10), a
    domain may be a ``*.`` wildcard (``sandbox_network.IsValidWildcardDomainPattern``) and keys must be unique
    ignoring case; before it (2026.29, the open e2b-dev/infra tree) a fixed 10 and DNS names only.
    """
    if not isinstance(network, dict):
        return None
    deny = network.get("denyOut") or []
    allow = network.get("allowOut") or []
    for cidr in deny:
        if not _is_specified(cidr):
            return f"invalid denied CIDR {cidr}"
    if allow:
        addresses = [entry for entry in allow if _is_ip_or_cidr(entry)]
        domains = [entry for entry in allow if not _is_ip_or_cidr(entry)]
        for address in addresses:
            if not _is_specified(address):
                return f"invalid allowed address {address}"
        if domains and ALL_TRAFFIC not in deny:
            return DOMAINS_NEED_BLOCK_ALL
    rules = network.get("rules")
    if rules is None:
        return None
    if os.environ.get("FAKE_E2B_TRANSFORM_RULES", "1") == "0":
        return "Network transform rules are not available for your team."
    if tuple(int(part) for part in envd_version.split(".")) < MIN_ENVD_FOR_RULES:
        return (
            "network transform rules are not supported; template must be rebuilt. Template envd version is "
            f"{envd_version}, must be at least 0.5.13"
        )
    newer = STATE.release >= WILDCARD_RELEASE
    max_domains = STATE.max_rule_domains if newer else MAX_RULE_DOMAINS
    if len(rules) > max_domains:
        return f"Network rules can have at most {max_domains} domains."
    seen: set[str] = set()
    for domain, domain_rules in rules.items():
        quoted = json.dumps(domain)  # Go's %q, for the names this suite uses
        if not domain:
            return "Rule domain must not be empty."
        if len(domain.encode()) > MAX_RULE_DOMAIN_LEN:
            return f"Rule domain {quoted} exceeds maximum length of {MAX_RULE_DOMAIN_LEN} characters."
        valid = _is_dns_name(domain)
        if newer and domain.startswith("*."):
            valid = _is_wildcard_pattern(domain)
        if not valid:
            return f"Rule domain {quoted} is not a valid domain name."
        if newer:
            if domain.lower() in seen:
                return "Network rule domain keys must be unique ignoring case."
            seen.add(domain.lower())
        if len(domain_rules) > MAX_TRANSFORMS_PER_DOMAIN:
            return f"Domain {quoted} can have at most {MAX_TRANSFORMS_PER_DOMAIN} transform rule."
        secrets: set[str] = set()
        for rule in domain_rules:
            headers = (rule.get("transform") or {}).get("headers") or {}
            if rule.get("transform") is None:
                continue
            if len(headers) > MAX_HEADERS_PER_RULE:
                return f"Domain {quoted} can have at most {MAX_HEADERS_PER_RULE} headers per rule."
            for name, value in headers.items():
                named = json.dumps(name)
                if not name:
                    return f"Header name in rule for domain {quoted} must not be empty."
                if _TOKEN.fullmatch(name) is None:
                    return (
                        f"Header name {named} in rule for domain {quoted} must contain only valid HTTP token "
                        "characters."
                    )
                if len(name) > MAX_HEADER_NAME_LEN:
                    return (
                        f"Header name {named} in rule for domain {quoted} exceeds maximum length of "
                        f"{MAX_HEADER_NAME_LEN} characters."
                    )
                if not _valid_header_value(value):
                    return f"Value for header {named} in rule for domain {quoted} contains invalid characters."
                if len(value.encode()) > MAX_HEADER_VALUE_LEN:
                    return (
                        f"Value for header {named} in rule for domain {quoted} exceeds maximum length of "
                        f"{MAX_HEADER_VALUE_LEN} characters."
                    )
                found = _placeholders(value)
                if found is None:
                    return "Network transform header contains a malformed E2B placeholder."
                secrets.update(name for prefix, name in found if prefix == "${e2b.secrets.")
                if len(secrets) > MAX_MARKER_NAMES:
                    return f"Rule domain {quoted} references more than {MAX_MARKER_NAMES} secrets."
    return None


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


STATE = State()


def envelope(flags: int, value: Any) -> bytes:
    data = json.dumps(value, separators=(",", ":")).encode()
    return struct.pack(">BI", flags, len(data)) + data


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def body(self) -> bytes:
        data = self.unpaced_body()
        if STATE.uplink and self.path.startswith("/files"):
            time.sleep(len(data) / STATE.uplink)  # the upload took that long to come (STATE.uplink)
        return data

    def paced_write(self, payload: bytes) -> None:
        """Send ``payload`` no faster than ``STATE.downlink``, in 64 KiB writes; a client gone stops it."""
        step = 64 << 10
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for at in range(0, len(payload), step):
                self.wfile.write(payload[at : at + step])
                self.wfile.flush()
                time.sleep(min(step, len(payload) - at) / STATE.downlink)

    def unpaced_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(length) if length else b""

    def send(self, status: int, payload: bytes = b"", content_type: str = "application/json") -> None:
        self.send_response_only(status)
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if status != 204:
            if STATE.downlink and content_type == "application/octet-stream":
                self.paced_write(payload)
            else:
                self.wfile.write(payload)

    def send_json(self, status: int, value: Any) -> None:
        self.send(status, json.dumps(value, separators=(",", ":")).encode())

    def box(self) -> Box | None:
        # A paused sandbox's envd is not there: E2B's proxy answers as for a sandbox it does not know (with
        # auto-resume off, the driver's case), packages/shared/pkg/proxy/template/sandbox_not_found.go.
        box = STATE.boxes.get(self.headers.get("E2b-Sandbox-Id", ""))
        return box if box is not None and box.state == "running" else None

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_DELETE(self) -> None:
        self.route("DELETE")

    def route(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = parts.path
        body = self.body()
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        # --- control plane
        # The API's header checks, as its server makes them (E2B_IDEMPOTENCY_KEY: e2b-dev/runtime
        # packages/api/internal/middleware/idempotency/middleware.go): a create whose Idempotency-Key is not one
        # value of 1 to 255 of a-z0-9 is a 400 and makes nothing. Not the SDK's rule (e2b/retry.py allows "-").
        rule = E2B.broken_rule(method, path, self.headers)
        if rule is not None:
            self.send_json(rule.status, dict(rule.body))
            return
        STATE.evict()
        if method == "POST" and path == "/v2/sandboxes":
            request = json.loads(body)
            # handlers/sandbox_create.go validateNetworkConfig: after the body parses, before anything is made.
            refused = network_problem(request.get("network"), ENVD_VERSION)
            if refused is not None:
                self.send_json(400, {"code": 400, "message": refused})
                return
            # handlers/timeout_helper.go validateAndParseTimeout: default 15 s, > 0, at most MaxLengthHours.
            timeout = request.get("timeout", 15)
            if timeout <= 0:
                self.send_json(400, {"code": 400, "message": "Timeout must be greater than 0"})
                return
            if timeout > STATE.max_length:
                message = f"Timeout cannot be greater than {STATE.max_hours} hours"
                self.send_json(400, {"code": 400, "message": message})
                return
            with STATE.lock:
                sandbox_id = f"i{next(STATE.ids):03d}fake{os.getpid() % 1000:03d}e2b"
                template = request.get("templateID", "base")
                metadata = dict(request.get("metadata") or {})
                number = int(sandbox_id[1:4])
                made = STATE.boxes[sandbox_id] = Box(sandbox_id, template, metadata, float(timeout))
                kept = STATE.templates.get(template)
            if template not in ("base", None) and kept is None and template.startswith("snap"):
                self.send_json(404, {"code": 404, "message": f"template '{template}' not found"})
                STATE.boxes.pop(sandbox_id, None)
                made.kill()
                return
            if kept is not None:
                # A box from a snapshot starts with its files (templates of a snapshot, snapshot_template_create.go).
                shutil.copytree(kept, made.root, symlinks=True, dirs_exist_ok=True)
            # Its egress proxy comes with its first command (``Box.proxy``): a create alone needs none.
            made.rules, made.number = (request.get("network") or {}).get("rules") or {}, number
            with STATE.lock:
                fail = STATE.creates_to_fail > 0
                STATE.creates_to_fail -= 1 if fail else 0
            if fail:
                # The sandbox exists and is billed; the answer was lost on the way (a gateway's 502).
                self.send(502, b"upstream connect error or disconnect/reset before headers", "text/plain")
                return
            self.send_json(
                201,
                {
                    "templateID": template,
                    "sandboxID": sandbox_id,
                    "clientID": "6532622b",
                    "alias": "base",
                    "envdVersion": ENVD_VERSION,
                    "envdAccessToken": "fake-envd-access",
                    "domain": None,
                },
            )
            return
        if method == "GET" and path == "/v2/sandboxes":
            # metadata is itself a url-encoded query ("k=v&k2=v2"), each key and value url-encoded once more.
            wanted = dict(parse_qsl(query.get("metadata", "")))
            with STATE.lock:
                found = [
                    b.listed() for b in STATE.boxes.values() if all(b.metadata.get(k) == v for k, v in wanted.items())
                ]
            self.send_json(200, found)
            return
        if method == "DELETE" and path.startswith("/templates/"):
            # DELETE /templates/{id} (the SDK's delete_snapshot): 204, or 404 for one it does not have.
            kept = STATE.templates.pop(path.split("/")[2], None)
            if kept is None:
                self.send_json(404, {"code": 404, "message": f"template '{path.split('/')[2]}' not found"})
                return
            shutil.rmtree(kept, ignore_errors=True)
            self.send(204)
            return
        if path.startswith("/sandboxes/") or path.startswith("/v2/sandboxes/"):
            sandbox_id = path.split("/")[3 if path.startswith("/v2/") else 2]
            box = STATE.boxes.get(sandbox_id)
            if box is None:
                message = f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it"
                self.send_json(404, {"code": 404, "message": message})
                return
            if method == "DELETE":
                STATE.boxes.pop(sandbox_id, None)
                box.kill()
                self.send(204)
                return
            if path.endswith("/timeout"):
                # handlers/sandbox_timeout.go + orchestrator/keep_alive.go KeepAliveFor(allowShorter=true):
                # the end becomes now + min(asked, cap - elapsed), silently; past the cap a 400.
                asked = max(float(json.loads(body or b"{}").get("timeout", 0)), 0.0)
                now = time.time()
                if now - box.start > STATE.max_length:
                    self.send_json(400, {"code": 400, "message": "Max instance length exceeded"})
                    return
                box.end = now + min(max(STATE.max_length - (now - box.start), 0.0), asked)
                self.send(204)
                return
            if path.endswith("/pause"):
                # handlers/sandbox_pause.go: a paused sandbox is a 409 (the SDK answers False). Its processes end
                # here (E2B keeps the VM's memory; the stand-in is no kinder: nothing of a command survives).
                if box.state == "paused":
                    self.send_json(409, {"code": 409, "message": f"Sandbox {box.id} is already paused"})
                    return
                box.state = "paused"
                box.evicted.set()  # its streams break, as the VM's connections do
                for running in list(box.procs.values()):
                    with contextlib.suppress(OSError):
                        os.kill(running.popen.pid, signal.SIGKILL)
                kill_under(box.root)
                self.send(204)
                return
            if path.endswith("/snapshots"):
                # snapshot_template_create.go: the sandbox's state as a template of its own; the source runs on.
                request = json.loads(body or b"{}")
                snapshot_id = f"snap{next(STATE.snapshot_ids):03d}fake{os.getpid() % 1000:03d}e2b"
                kept = Path(tempfile.mkdtemp(prefix=f"fake-e2b-{snapshot_id}-"))
                shutil.copytree(box.root, kept, symlinks=True, dirs_exist_ok=True)
                STATE.templates[snapshot_id] = kept
                names = [request["name"]] if request.get("name") else []
                self.send_json(201, {"snapshotID": snapshot_id, "names": names})
                return
            if path.endswith("/connect") and box.state == "paused":
                # sandbox_connect.go: a sandbox not running is resumed (startSandbox, isResume) for the timeout
                # asked, its start anew; 201, as a create.
                asked = float(json.loads(body or b"{}").get("timeout") or 15)
                box.state, box.evicted = "running", threading.Event()
                box.start = time.time()
                box.end = box.start + min(asked, STATE.max_length)
                answer = {
                    k: v
                    for k, v in box.listed().items()
                    if k in ("templateID", "sandboxID", "clientID", "alias", "envdVersion")
                }
                self.send_json(201, {**answer, "envdAccessToken": "fake-envd-access", "domain": None})
                return
            if path.endswith("/refreshes"):
                # handlers/sandbox_refresh.go: duration (default and at least SandboxTimeoutDefault, 15 s), then
                # orchestrator/keep_alive.go KeepAliveFor(allowShorter=false): past the cap a 400; an end sooner
                # than the one set is ErrCannotShortenTTL, answered 204 with nothing changed.
                duration = max(float(json.loads(body or b"{}").get("duration") or 15), 15.0)
                now = time.time()
                if now - box.start > STATE.max_length:
                    self.send_json(400, {"code": 400, "message": "Max instance length exceeded"})
                    return
                box.end = max(box.end, now + min(max(STATE.max_length - (now - box.start), 0.0), duration))
                self.send(204)
                return
            if path.endswith("/connect"):
                # handlers/sandbox_connect.go: KeepAliveFor(body.timeout, allowShorter=false), never sooner; the
                # driver sends no timeout (0), so its connect leaves the end as it is.
                asked = float(json.loads(body or b"{}").get("timeout") or 0)
                box.end = max(box.end, min(time.time() + asked, box.start + STATE.max_length))
                keys = ("templateID", "sandboxID", "clientID", "alias", "envdVersion")
                answer = {k: v for k, v in box.listed().items() if k in keys}
                self.send_json(200, {**answer, "envdAccessToken": "fake-envd-access", "domain": None})
                return
            if method == "GET":
                self.send_json(200, {**box.listed(), "envdAccessToken": "fake-envd-access", "domain": None})
                return
        # --- envd, behind E2B's proxy
        box = self.box()
        if box is None:
            sandbox_id = self.headers.get("E2b-Sandbox-Id", "")
            self.send_json(502, {"sandboxId": sandbox_id, "message": "The sandbox was not found", "code": 502})
            return
        if path == "/health":
            self.send(204)
        elif path == "/files" and method == "POST":
            self.upload(box, body, query)
        elif path == "/files" and method == "GET":
            target = box.map(query["path"])
            if not target.is_file():
                self.send_json(404, {"code": 404, "message": f"path '{query['path']}' does not exist"})
            else:
                self.send(200, target.read_bytes(), "application/octet-stream")
        elif path == "/filesystem.Filesystem/ListDir":
            self.list_dir(box, json.loads(body))
        elif path == "/process.Process/SendSignal":
            request = json.loads(body)
            pid = int(request["process"]["pid"])
            proc = box.procs.get(pid)
            if proc is None:
                self.send_json(404, {"code": "not_found", "message": f"process with pid {pid} not found"})
                return
            proc.out_cancelled.set()
            with contextlib.suppress(OSError):
                os.kill(proc.popen.pid, signal.SIGKILL if request.get("signal") == "SIGNAL_SIGKILL" else signal.SIGTERM)
            self.send_json(200, {})
        elif path == "/process.Process/Start":
            self.start(box, body)
        elif path == "/process.Process/SendInput":
            self.send_input(box, json.loads(body))
        elif path == "/process.Process/CloseStdin":
            self.close_stdin(box, json.loads(body))
        else:
            self.send_json(404, {"code": "unimplemented", "message": path})

    def process_of(self, box: Box, request: dict[str, Any]) -> Proc | None:
        """service.go getProcess: the process the selector names, or a Connect not_found answered here."""
        pid = int((request.get("process") or {}).get("pid") or 0)
        proc = box.procs.get(pid)
        if proc is None:
            self.send_json(404, {"code": "not_found", "message": f"process with pid {pid} not found"})
        return proc

    def send_input(self, box: Box, request: dict[str, Any]) -> None:
        """input.go SendInput -> handler.go WriteStdin: refused where stdin was not enabled or is closed."""
        proc = self.process_of(box, request)
        if proc is None:
            return
        given = request.get("input") or {}
        if "stdin" not in given:  # the stand-in starts no PTY: any other input is handleInput's default case
            self.send_json(501, {"code": "unimplemented", "message": "invalid input type"})
            return
        with proc.stdin_lock:
            if proc.stdin is None:
                message = "error writing to stdin: stdin not enabled or closed"
                self.send_json(500, {"code": "internal", "message": message})
                return
            try:
                proc.stdin.write(base64.b64decode(given["stdin"]))
                proc.stdin.flush()
            except OSError as exc:
                message = f"error writing to stdin: error writing to stdin of process '{proc.popen.pid}': {exc}"
                self.send_json(500, {"code": "internal", "message": message})
                return
        self.send_json(200, {})

    def close_stdin(self, box: Box, request: dict[str, Any]) -> None:
        """input.go CloseStdin -> handler.go CloseStdin: closing a closed (or absent) stdin is no error."""
        proc = self.process_of(box, request)
        if proc is None:
            return
        with proc.stdin_lock:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
                proc.stdin = None
        self.send_json(200, {})

    def upload(self, box: Box, body: bytes, query: dict[str, str]) -> None:
        parts = parse_multipart(body, self.headers.get("content-type", "")) or []
        written = []
        for part in parts:
            name = str(query.get("path") if len(parts) == 1 and query.get("path") else part["filename"])
            target = box.map(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(part["data"])
            written.append({"name": Path(name).name, "type": "file", "path": name})
        self.send_json(200, written)

    def list_dir(self, box: Box, request: dict[str, Any]) -> None:
        base = request["path"]
        root = box.map(base)
        if not root.is_dir():
            self.send_json(404, {"code": "not_found", "message": f"directory '{base}' does not exist"})
            return
        depth = int(request.get("depth") or 1)
        entries = []

        def walk(folder: Path, rel: str, level: int) -> None:
            for child in sorted(folder.iterdir()):
                path = f"{rel}/{child.name}"
                info = child.lstat()
                entry: dict[str, Any] = {
                    "name": child.name,
                    "path": path,
                    "size": str(info.st_size),
                    "mode": 0o644,
                    "permissions": "-rw-r--r--",
                    "owner": "user",
                    "group": "user",
                    "modifiedTime": "2026-11-29T12:00:00Z",
                }
                if child.is_symlink():
                    entry["type"] = "FILE_TYPE_SYMLINK"
                    entry["symlinkTarget"] = os.readlink(child)
                elif child.is_dir():
                    entry["type"] = "FILE_TYPE_DIRECTORY"
                    entry["mode"] = 0o755 | 0o40000
                    entry["permissions"] = "drwxr-xr-x"
                    entry["size"] = "4096"
                else:
                    entry["type"] = "FILE_TYPE_FILE"
                entries.append(entry)
                if child.is_dir() and not child.is_symlink() and level < depth:
                    walk(child, path, level + 1)

        walk(root, base.rstrip("/"), 1)
        self.send_json(200, {"entries": entries})

    def start(self, box: Box, body: bytes) -> None:
        request = json.loads(body[5:])
        process = request["process"]
        argv = [process["cmd"], *[box.rewrite(arg) for arg in process.get("args") or []]]
        # The sandbox's /opt/mainsdk (the cell kernel's packages, which its start line and cells name as they
        # are, on stdin) at its real path, in a mount namespace of the command's own: the host's /opt is not the
        # VM's. unshare (no --fork) and sh's exec keep the command at the pid started here, as envd's.
        # A sandbox with rules: its proxy's bundle, names and the image's pip too (fake_egress.py).
        egress = box.proxy()
        mounts, extra = ("", [])
        if egress is not None:
            from fake_egress import MOUNTS

            mounts, extra = MOUNTS + " && ", egress.mount_args()
        argv = ["unshare", "-m", "sh", "-c", mounts + OPT_MOUNT, "sh", *extra, str(box.map("/opt/mainsdk")), *argv]
        env = dict(process.get("envs") or {})
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        # envd gives a command its user's HOME and USER; here the stand-in's home, so no profile of this host runs.
        env.setdefault("HOME", str(box.map(HOME)))
        env.setdefault("USER", "user")
        # start.go / handler.go: stdin is a pipe when the request leaves it out or says true (backwards
        # compatible), /dev/null when it says false, as the SDK does unless asked.
        with_stdin = request.get("stdin", True) is not False
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=box.map(HOME),
        )
        proc = Proc(popen)
        pid = popen.pid  # the pid the sandbox's own ps would show; a later command may name it
        box.procs[pid] = proc
        timeout_ms = int(self.headers.get("Connect-Timeout-Ms") or 0)
        if timeout_ms:
            # exec.CommandContext: at the request's timeout the one process is killed, nothing it started.
            timer = threading.Timer(timeout_ms / 1000, lambda: _kill_one(popen))
            timer.daemon = True
            timer.start()
        keepalive = float(self.headers.get("Keepalive-Ping-Interval") or 90)
        chunks: queue.Queue[tuple[str, bytes]] = queue.Queue()

        def pump(name: str, stream: Any) -> None:
            # envd reads a command's pipes 32 KiB at a time and sends each read as one data event
            # (handler.go stdChunkSize): a cell's frame with a PNG in it comes in several events.
            while data := os.read(stream.fileno(), STD_CHUNK_SIZE):
                chunks.put((name, data))
            chunks.put((name, b""))

        for name, stream in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            threading.Thread(target=pump, args=(name, stream), daemon=True).start()
        self.send_response_only(200)
        self.send_header("Content-Type", "application/connect+json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        connected = True

        def frame(flags: int, value: Any) -> None:
            nonlocal connected
            if not connected:
                return  # the client went away: the process runs on regardless (start.go)
            data = envelope(flags, value)
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                connected = False

        frame(0, {"event": {"start": {"pid": pid}}})
        open_streams = 2
        quiet_since = time.monotonic()
        while open_streams and not proc.out_cancelled.is_set():
            if box.evicted.is_set():
                # The VM is gone: its proxy's connection drops, with no end event.
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(2)
                box.procs.pop(pid, None)
                return
            try:
                name, data = chunks.get(timeout=0.2)
            except queue.Empty:
                if time.monotonic() - quiet_since >= keepalive:
                    frame(0, {"event": {"keepalive": {}}})
                    quiet_since = time.monotonic()
                continue
            if not data:
                open_streams -= 1
                continue
            frame(0, {"event": {"data": {name: base64.b64encode(data).decode()}}})
            quiet_since = time.monotonic()
        code = popen.wait()
        frame(0, {"event": {"end": end_event(code)}})
        frame(2, {})
        if connected:
            with contextlib.suppress(OSError):
                self.wfile.write(b"0\r\n\r\n")
        box.procs.pop(pid, None)


def _kill_one(popen: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        popen.kill()


# Go's names for the signals a command may die of (syscall.Signal.String()), as ProcessState.String() says them.
GO_SIGNALS = {
    signal.SIGKILL: "killed",
    signal.SIGTERM: "terminated",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGABRT: "aborted",
    signal.SIGINT: "interrupt",
    signal.SIGHUP: "hangup",
    signal.SIGPIPE: "broken pipe",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception",
    signal.SIGILL: "illegal instruction",
    signal.SIGXCPU: "CPU time limit exceeded",
}


def end_event(code: int) -> dict[str, Any]:
    """envd's end event (handler.go ``Wait``) as protojson writes it: zero values (exitCode 0, exited false) omitted."""
    if code < 0:
        # A signal: ExitCode() is -1, Exited() false, and cmd.Wait's error names the signal.
        status = f"signal: {GO_SIGNALS.get(signal.Signals(-code), f'signal {-code}')}"
        return {"exitCode": -1, "status": status, "error": status}
    status = f"exit status {code}"
    event: dict[str, Any] = {"exited": True, "status": status}
    if code:
        event["exitCode"] = code
        event["error"] = status
    return event


def _reaper() -> None:
    while True:
        time.sleep(0.2)
        STATE.evict()


def serve() -> tuple[str, str]:
    threading.Thread(target=_reaper, daemon=True).start()
    urls = []
    for _ in ("api", "sandbox"):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        urls.append(f"http://127.0.0.1:{server.server_address[1]}")
    return urls[0], urls[1]


if __name__ == "__main__":
    api, sandbox = serve()
    print(api, sandbox, flush=True)
    threading.Event().wait()
