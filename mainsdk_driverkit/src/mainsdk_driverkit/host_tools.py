"""How the host runs a tool for a box (a package installer, an interpreter probe): nothing a box wrote steers it.

Box output can land in the app's folder (``mainsdk sandbox run --out .``), so a tool started there would read
a planted ``uv.toml``, ``pip.conf``, ``pip.py`` or ``sitecustomize.py``. Each such tool runs instead

- in a fresh, private (0700), empty working folder made for that one call (:func:`private_folder`);
- with interpreters started ``-I`` (no current folder or script folder on ``sys.path``, no user site, no
  ``PYTHON*`` variable) and uv given ``--no-config``;
- found through ``PATH``'s absolute entries only (:func:`absolute_path`);
- in the app's environment less every ``PIP_*``, ``UV_*`` and ``PYTHON*`` variable but the index settings
  of :data:`INDEX_VARIABLES`, with ``PIP_CONFIG_FILE`` set to ``/dev/null``, which makes pip read no
  configuration file at all (not ``/etc/pip.conf``, the user's, nor one in the interpreter's prefix)
  (:func:`tool_environment`).

The index settings stay in the environment, where pip and uv read them, rather than on the command line: an
index URL may carry a token, and a command line is readable by every user of the host.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from mainsdk.driver import INVALID_OPTION, SandboxError

# The only installer settings honoured, each read by its own installer from the app's environment.
PIP_INDEX_VARIABLES = (
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_TRUSTED_HOST", "PIP_CERT",
    "PIP_DEFAULT_TIMEOUT", "PIP_TIMEOUT",
)  # fmt: skip
UV_INDEX_VARIABLES = (
    "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_NO_INDEX",
    "UV_INSECURE_HOST", "UV_HTTP_TIMEOUT", "UV_NATIVE_TLS",
)  # fmt: skip
INDEX_VARIABLES = frozenset(PIP_INDEX_VARIABLES + UV_INDEX_VARIABLES)
# Lists of locations: pip splits on whitespace, uv's UV_FIND_LINKS on commas.
_FIND_LINKS = {"PIP_FIND_LINKS": r"\s+", "UV_FIND_LINKS": r"[,\s]+"}


def absolute_path(environ: Mapping[str, str] | None = None) -> str:
    """``PATH`` without its relative entries (``.``, ``bin``, an empty one): each names the current folder's."""
    value = (os.environ if environ is None else environ).get("PATH", os.defpath)
    return os.pathsep.join(entry for entry in value.split(os.pathsep) if os.path.isabs(entry))


@contextmanager
def private_folder() -> Iterator[str]:
    """A new empty folder only this user can enter (``mkdtemp`` makes it 0700), removed when the call is done."""
    folder = tempfile.mkdtemp(prefix="mainsdk-tool-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def tool_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a tool the host runs for a box: the app's, less what could steer the tool.

    Every ``PIP_*``, ``UV_*`` and ``PYTHON*`` variable is dropped but :data:`INDEX_VARIABLES`; proxy and CA
    variables (``HTTPS_PROXY``, ``SSL_CERT_FILE``, ``REQUESTS_CA_BUNDLE``) stay, as each tool reads them.
    Raises ``MAIN-SANDBOX-0001`` naming the variable when a find-links entry is a relative path: the tool
    runs in an empty private folder, and the app's own folder is where box output lands.
    """
    source = os.environ if environ is None else environ
    env = {
        name: value
        for name, value in source.items()
        if name in INDEX_VARIABLES or not name.startswith(("PIP_", "UV_", "PYTHON"))
    }
    for name, separator in _FIND_LINKS.items():
        for entry in re.split(separator, env.get(name, "").strip()):
            if entry and "://" not in entry and not os.path.isabs(entry):
                raise SandboxError(
                    INVALID_OPTION,
                    f"packages: {name} names the relative path {entry!r}; the installer runs in an empty private "
                    "folder, never the app's (box output lands there): give an absolute path or a URL",
                    ran=False,
                )
    env["PATH"] = absolute_path(source)  # a program found through a relative entry would be the app's folder's
    env["PIP_CONFIG_FILE"] = os.devnull  # pip then loads no configuration file at all (pip's configuration.py)
    env["UV_NO_CONFIG"] = "1"  # as --no-config: no uv.toml or pyproject.toml, the user's and system's included
    return env
