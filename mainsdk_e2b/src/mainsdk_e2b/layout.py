"""Where things are in an E2B box: the seed's folders, the one PATH a command gets, the bundle E2B's CA is in."""

from __future__ import annotations

# The seed's two folders, side by side so ``../out`` from the work folder is the out folder, as on the local driver.
HOME = "/home/user"
WORK = f"{HOME}/work"
OUT = f"{HOME}/out"
# The only variables a command gets besides the ones it is given: a login shell's would leak the template's.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The bundle envd appends E2B's egress-proxy CA to, at every create and resume (e2b-dev/infra
# packages/envd/internal/host/cacerts.go ``CaBundlePath``, from /init's ``caBundle``, api/init.go), and only it:
# curl and urllib read it, but requests, httpx and pip (certifi), git and node (its own store) do not. With egress
# headers E2B's proxy ends TLS for the rules' hosts with that CA, so each client is pointed at the bundle.
E2B_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TRUST_VARIABLES = (
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
)
