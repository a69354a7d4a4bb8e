"""The certificates of a box whose run has ``egress`` headers: a CA made for that box, and a leaf per named host.

The proxy terminates TLS for the hosts of ``BoxSpec.egress`` alone, so it can set their headers; every other
host stays a blind tunnel. What makes that safe:

- A new CA key per box (EC P-256, made in memory with ``cryptography``), never written anywhere but a file of a
  fresh 0700 folder of the app's own temp space, for the instant ``ssl`` needs to load a leaf (it reads keys
  from files only), removed at once. The key never enters the box; the box gets the CA's certificate alone.
- The CA is name-constrained (RFC 5280 4.2.1.10) to the box's egress hosts: even its key could sign nothing
  else a client would accept. It lives as long as the box may (at most a day past now).
- The box trusts it through a bundle of the system's CAs plus it, written in the box's own work folder
  (``TRUST_BUNDLE``), named by ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, ``PIP_CERT``,
  ``GIT_SSL_CAINFO`` and ``NODE_EXTRA_CA_CERTS`` (``trust_environment``).
- Toward the real server the proxy is a client as any other: ``ssl.create_default_context()`` (the system's
  trust, hostname checked), or the test CA the driver was given (``upstream_ca``, tests only).
- Both sides offer only ``http/1.1`` in ALPN: a client asking for h2 falls back to HTTP/1.1, which the proxy
  parses (h11).
"""

from __future__ import annotations

import datetime
import functools
import os
import ssl
import tempfile
from collections.abc import Iterable

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ALPN = ["http/1.1"]
# Where the box finds its trust bundle, relative to its work folder (the box's own space, on its own tmpfs).
TRUST_FOLDER = ".mainsdk"
TRUST_BUNDLE = f"{TRUST_FOLDER}/egress-ca-bundle.pem"
TRUST_VARIABLES = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO")
LIFETIME = datetime.timedelta(days=1)


@functools.cache
def system_trust() -> bytes:
    """The PEM of the system's CAs (OpenSSL's default file), read once; empty when there is none."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile):
        if path and os.path.isfile(path):
            with open(path, "rb") as file:
                return file.read()
    return b""


def trust_environment(work_dir: str) -> dict[str, str]:
    """The variables that make the box's TLS clients trust its bundle (``work_dir``: the box's work folder)."""
    path = f"{work_dir}/{TRUST_BUNDLE}"
    return {**dict.fromkeys(TRUST_VARIABLES, path), "NODE_EXTRA_CA_CERTS": path}


def upstream_context(cadata: str | None = None) -> ssl.SSLContext:
    """How the proxy checks a real server: as a default client would, or against ``cadata`` alone (tests)."""
    context = ssl.create_default_context(cadata=cadata) if cadata else ssl.create_default_context()
    context.set_alpn_protocols(ALPN)
    return context


class BoxAuthority:
    """A box's own CA and the server contexts of its leaf certificates, one per egress host, made on first use."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self.hosts = tuple(dict.fromkeys(hosts))
        now = datetime.datetime.now(datetime.UTC)
        self._not_before = now - datetime.timedelta(minutes=5)  # a clock a little behind still accepts it
        self._not_after = now + LIFETIME
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mainsdk sandbox egress CA (this box only)")])
        permitted: list[x509.GeneralName] = [x509.DNSName(host) for host in self.hosts]
        self._name = name
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.NameConstraints(permitted_subtrees=permitted, excluded_subtrees=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.ca_pem = self.certificate.public_bytes(serialization.Encoding.PEM)
        self._contexts: dict[str, ssl.SSLContext] = {}

    def bundle(self) -> bytes:
        """What the box trusts: the system's CAs and this box's CA."""
        system = system_trust()
        return system + (b"" if not system or system.endswith(b"\n") else b"\n") + self.ca_pem

    def server_context(self, host: str) -> ssl.SSLContext:
        """The TLS server context the proxy shows the code for ``host`` (one of ``hosts``)."""
        context = self._contexts.get(host)
        if context is None:
            if host not in self.hosts:
                raise ValueError(f"{host} is not an egress host of this box")
            context = self._make_context(host)
            self._contexts[host] = context
        return context

    def _make_context(self, host: str) -> ssl.SSLContext:
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self._name)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._not_before)
            .not_valid_after(self._not_after)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(ALPN)
        chain = leaf.public_bytes(serialization.Encoding.PEM) + self.ca_pem
        key = self._leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _load_chain(context, chain, key)
        return context


def _load_chain(context: ssl.SSLContext, chain: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only: a fresh 0700 folder of the app's temp space, removed at once."""
    with tempfile.TemporaryDirectory(prefix="mainsdk-egress-") as folder:
        cert_path, key_path = os.path.join(folder, "chain.pem"), os.path.join(folder, "key.pem")
        for path, data in ((cert_path, chain), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(data)
        context.load_cert_chain(cert_path, key_path)
