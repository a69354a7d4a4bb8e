"""E2B's egress proxy for the authoring stand-in (``fake_e2b.py``): TLS ended for the rules' hosts, as E2B ends it.

What E2B does, and this copies:

- The orchestrator hands every sandbox its egress proxy's CA (``packages/orchestrator/pkg/sandbox/sandbox.go``
  ``CABundle: f.egressProxy.CABundle()``, through envd's ``/init`` ``caBundle``, ``packages/envd/internal/api/
  init.go``), and envd **appends it to the system bundle only**, ``/etc/ssl/certs/ca-certificates.crt``
  (``packages/envd/internal/host/cacerts.go`` ``CaBundlePath``, ``install``: ``os.O_APPEND``). It sets no
  variable: clients that read that file (curl, Python's ``ssl`` default paths, so urllib) trust the proxy;
  those that carry their own store (requests, httpx and pip through certifi, node's built-in roots) do not.
- The proxy, outside the VM, sets each header of a domain's rule on the sandbox's requests to it (the create's
  ``network.rules``, ``handlers/sandbox_create.go``); on 443 that means ending the TLS the code opened, with a
  certificate from that CA, and reading the request. Other hosts keep their own TLS (``tcpfirewall/proxy.go``:
  SNI peeked, nothing decrypted).

Here, per sandbox with rules: a CA and one leaf naming the rules' hosts (``cryptography``); a copy of this host's
bundle with the CA appended, bound over ``/etc/ssl/certs/ca-certificates.crt`` in each command's mount namespace;
``/etc/hosts`` bound likewise, naming the rules' hosts at a loopback address of the sandbox's own, where a TLS
server on 443 ends TLS, replaces the rule's headers and answers as the origin would (this host reaches no
internet): 401 without the rule's header, as OpenWeatherMap answers a request with no key, else the answer for
a valid key.

The image's pip: E2B's base template is ``FROM python:3.11.6`` (e2b-dev/E2B ``templates/base/e2b.Dockerfile``),
whose pip (23.2.1) and the requests it vendors trust its vendored certifi; this host's Debian pip is patched to
the system bundle, so a box with rules gets pip 23.2.1 from PyPI bound over it (``IMAGE_PIP``), or pip's
requests would pass here and fail on E2B. The template has no other requests and no httpx.
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import json
import ssl
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # cacerts.go CaBundlePath
IMAGE_PIP = "23.2.1"  # python:3.11.6's PYTHON_PIP_VERSION
CACHE = Path("/var/tmp/fake-e2b-cache")
# What the origin stand-in answers: OpenWeatherMap's shape, for the seed's weather example.
WEATHER = {"name": "Paris", "main": {"temp": 18.4}, "cod": 200}
NO_KEY = {"cod": 401, "message": "Invalid API key. Please see https://openweathermap.org/faq#error401 for more info."}

# The mounts each command of a sandbox with rules gets, after /opt's: $1 bundle, $2 hosts, $3 image pip, $4 pip's
# place in this host's python. Then the command.
MOUNTS = (
    'mount --bind "$1" /etc/ssl/certs/ca-certificates.crt && mount --bind "$2" /etc/hosts '
    '&& mount --bind "$3" "$4" && shift 4'
)


def image_pip() -> tuple[str, str]:
    """(the image's pip package folder, this host python3's pip folder it is bound over), fetched once."""
    target = CACHE / f"pip-{IMAGE_PIP}"
    if not (target / "pip").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(CACHE), f"pip=={IMAGE_PIP}"],
            check=True,
        )
        with zipfile.ZipFile(CACHE / f"pip-{IMAGE_PIP}-py3-none-any.whl") as wheel:
            wheel.extractall(target)
    host = subprocess.run(
        ["/usr/bin/python3", "-c", "import os, pip; print(os.path.dirname(pip.__file__))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return str(target / "pip"), host


class _Quiet(http.server.ThreadingHTTPServer):
    """A server that says nothing of a handshake the client refused (the point of the clients without the CA)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class Egress:
    """One sandbox's egress proxy: its CA, the files bound into its commands, its TLS server."""

    def __init__(self, root: Path, number: int, rules: dict[str, list[dict[str, Any]]]) -> None:
        self.address = f"127.77.{number >> 8 & 255}.{number & 255}"
        self.headers = {
            host.lower(): dict((rule.get("transform") or {}).get("headers") or {})
            for host, host_rules in rules.items()
            for rule in host_rules[:1]
        }
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-e2b egress proxy CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, next(iter(self.headers), "egress"))]))
            .issuer_name(name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in self.headers]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        pem = ca.public_bytes(serialization.Encoding.PEM)
        folder = root / ".fake-e2b"
        folder.mkdir(mode=0o700)
        # cacerts.go install: the system bundle, the CA appended (one trailing newline), nothing else.
        system = Path(SYSTEM_BUNDLE).read_bytes()
        self.bundle = folder / "ca-certificates.crt"
        self.bundle.write_bytes(system + (b"" if system.endswith(b"\n") else b"\n") + pem)
        self.hosts = folder / "hosts"
        lines = "".join(f"{self.address} {host}\n" for host in self.headers)
        self.hosts.write_text(Path("/etc/hosts").read_text() + lines)
        chain, key_file = folder / "leaf.pem", folder / "leaf.key"
        chain.write_bytes(leaf.public_bytes(serialization.Encoding.PEM) + pem)
        key_file.write_bytes(
            leaf_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        context.load_cert_chain(chain, key_file)
        key_file.unlink()
        self.pip, self.host_pip = image_pip()
        headers = self.headers

        class Proxy(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                host = (self.headers.get("Host") or "").split(":")[0].lower()
                rule = headers.get(host, {})
                for header, value in rule.items():  # the transform replaces, never merges
                    del self.headers[header]
                    self.headers[header] = value
                if all(self.headers.get(h) == v for h, v in rule.items()) and rule:
                    status, body, kind = 200, json.dumps(WEATHER).encode(), "application/json"
                else:
                    status, body, kind = 401, json.dumps(NO_KEY).encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = _Quiet((self.address, 443), Proxy)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.server.serve_forever()

    def mount_args(self) -> list[str]:
        """The arguments of ``MOUNTS``."""
        return [str(self.bundle), str(self.hosts), self.pip, self.host_pip]

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
