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

Here: ``mainsdk_conformance.egress_standin.TlsEgress`` per sandbox with rules, its bundle bound over
``/etc/ssl/certs/ca-certificates.crt`` and its names over ``/etc/hosts`` in each command's mount namespace.

The image's pip: E2B's base template is ``FROM python:3.11.6`` (e2b-dev/E2B ``templates/base/e2b.Dockerfile``),
whose pip (23.2.1) and the requests it vendors trust its vendored certifi; this host's Debian pip is patched to
the system bundle, so a box with rules gets pip 23.2.1 from PyPI bound over it (``IMAGE_PIP``), or pip's
requests would pass here and fail on E2B. The template has no other requests and no httpx.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from mainsdk_conformance.egress_standin import TlsEgress

IMAGE_PIP = "23.2.1"  # python:3.11.6's PYTHON_PIP_VERSION
CACHE = Path("/var/tmp/fake-e2b-cache")

# The mounts each command of a sandbox with rules gets, before /opt's: $1 bundle, $2 hosts, $3 image pip, $4 pip's
# place in this host's python. Then the command.
# This host's /etc/pip.conf (if any) is hidden: the template has none, and a ``cert`` in it would stand in for
# PIP_CERT.
MOUNTS = (
    'mount --bind "$1" /etc/ssl/certs/ca-certificates.crt && mount --bind "$2" /etc/hosts '
    '&& mount --bind "$3" "$4" && { [ ! -e /etc/pip.conf ] || mount --bind /dev/null /etc/pip.conf; } && shift 4'
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


class Egress(TlsEgress):
    """One sandbox's egress proxy for its create's ``network.rules``, and the image's pip (``image_pip``)."""

    def __init__(self, root: Path, number: int, rules: dict[str, list[dict[str, Any]]]) -> None:
        # One transform a domain (sandbox_create.go maxTransformsPerDomain): its headers.
        headers = {host: dict((r[0].get("transform") or {}).get("headers") or {}) for host, r in rules.items() if r}
        super().__init__(root, number, headers, "fake-e2b")
        self.pip, self.host_pip = image_pip()

    def mount_args(self) -> list[str]:
        """The arguments of ``MOUNTS``."""
        return [str(self.bundle), str(self.hosts), self.pip, self.host_pip]
