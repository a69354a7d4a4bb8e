"""A stand-in for a provider's credential-injecting egress proxy, for authoring cassettes on this machine.

Not part of any driver and never run by a test: a provider stand-in (E2B's ``fake_e2b.py``, Vercel's
``simulator.py``) starts one per box whose create sets headers at the egress, and binds its files into the box's
commands (a mount namespace of theirs):

- ``bundle``: this host's system bundle (``SYSTEM_BUNDLE``) with the box's own CA appended, and nothing else:
  what a provider that adds its CA to the system trust store gives (E2B's envd, e2b-dev/infra
  ``packages/envd/internal/host/cacerts.go``); a client with its own store (certifi, node's) does not trust it.
- ``hosts``: ``/etc/hosts`` with the egress hosts at a loopback address of the box's own, where a TLS server on
  443 ends TLS with a leaf from that CA, replaces each header of the host's rule (never merges) and answers as
  the origin would, since this machine reaches no internet: 401 without the rule's headers, as OpenWeatherMap
  answers a request with no key, else OpenWeatherMap's answer for a valid key (``WEATHER``), and a one-project
  package index under ``/simple/`` (``PROJECT``, ``tiny_wheel``) so pip has something to fetch.

Needs ``cryptography`` (imported here only: the authoring machine has it; no test imports this module).
"""

from __future__ import annotations

import contextlib
import datetime
import http.server
import io
import json
import ssl
import threading
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's and Ubuntu's; E2B's cacerts.go CaBundlePath
WEATHER = {"name": "Paris", "main": {"temp": 18.4}, "cod": 200}
# A package index on the host too (PEP 503), so pip has a project to fetch: one wheel of one small module.
PROJECT = "weather-stub"
WHEEL = "weather_stub-1.0-py3-none-any.whl"
SIMPLE = f"<!DOCTYPE html><html><body><a href='/files/{WHEEL}'>{WHEEL}</a></body></html>"
NO_KEY = {"cod": 401, "message": "Invalid API key. Please see https://openweathermap.org/faq#error401 for more info."}


def tiny_wheel() -> bytes:
    """``WHEEL``: a valid wheel (PEP 427) of one module, made in memory, the same bytes every time."""
    files = {
        "weather_stub.py": "CITY = 'Paris'\n",
        "weather_stub-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: weather-stub\nVersion: 1.0\n",
        "weather_stub-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: egress_standin\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "weather_stub-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, text in {**files, "weather_stub-1.0.dist-info/RECORD": record}.items():
            wheel.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), text)
    return buffer.getvalue()


class _Quiet(http.server.ThreadingHTTPServer):
    """A server that says nothing of a handshake the client refused (the point of the clients without the CA)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class TlsEgress:
    """One box's credential-injecting egress proxy: its CA, the files bound into its commands, its TLS server."""

    def __init__(self, root: Path, number: int, headers: Mapping[str, Mapping[str, str]], label: str) -> None:
        self.address = f"127.77.{number >> 8 & 255}.{number & 255}"
        self.headers = {host.lower(): dict(values) for host, values in headers.items()}
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{label} egress proxy CA (authoring stand-in)")])
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
        folder = root / ".egress-standin"
        folder.mkdir(mode=0o700)
        # The system bundle, the CA appended (one trailing newline), nothing else: as envd's cacerts.go install.
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
                keyed = bool(rule) and all(self.headers.get(h) == v for h, v in rule.items())
                if keyed and self.path.rstrip("/") == f"/simple/{PROJECT}":
                    status, body, kind = 200, SIMPLE.encode(), "text/html"
                elif keyed and self.path == f"/files/{WHEEL}":
                    status, body, kind = 200, tiny_wheel(), "application/octet-stream"
                elif keyed:
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

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()
