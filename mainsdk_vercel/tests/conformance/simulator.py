"""A stand-in for Vercel Sandbox's REST API (v3 create, v2 sessions) on loopback, used to author cassettes.

We have no Vercel account, so the conformance cassettes are authored: the
suite runs in record mode with its recorder forwarding here instead of to
api.vercel.com, and ``author.py`` marks what it wrote ``made: authored``.

Every shape follows the current official clients, read for this:

- ``vercel-sandbox`` 0.10.0 (PyPI), ``vercel/sandbox/_internal/api_client.py``:
  create is ``POST /v3/sandboxes`` answering ``{sandbox, session, routes}``;
  everything after it is keyed by the session id, ``/v2/sandboxes/sessions/{id}/...``;
  ``run_process`` posts ``cmd?wait=true&logs=true`` and reads one NDJSON stream:
  the command, its log lines, the command again with ``exitCode``;
  ``kill_command`` posts ``cmd/{cmdId}/kill`` ``{signal}`` and validates a
  ``{command}`` answer; ``stop_runtime_session`` posts ``stop`` ``{}``.
- ``@vercel/sandbox`` (github vercel/sandbox, ``packages/vercel-sandbox/src/api-client/api-client.ts``,
  commit 087d659 "Use the V2 endpoints instead of V1"): the same paths; a 410
  means the session is stopped and a 422 ``sandbox_stopping`` that it is
  stopping (``sandbox.ts``, ``isSandboxStoppedError`` / ``isSandboxStoppingError``).

A kill signals the command's one process (the API names a command, not a
process group): the process ``command`` named, which ``unshare`` (no
``--fork``) and ``sh -c 'exec'`` leave at the same pid. Stop kills
everything the sandbox ran. A wrong token is answered as Vercel's
API does: 403 with ``invalidToken`` (providers.md, checked 2026-11-30).

Commands run as plain host processes in a private temporary folder standing
for ``/vercel``, in their own mount namespace with the sandbox's own ``/tmp`` and ``/opt/mainsdk`` (the host's
files are not the VM's). Not a sandbox: test code only.

The box is laid out as the image it stands for (``IMAGES``; github vercel/sandbox at 81d725b7,
``images/ubuntu/Dockerfile``, ``images/universal/Dockerfile``, ``images/python/Dockerfile``,
``images/node/Dockerfile``): ``HOME=/vercel`` and ``WORKDIR /vercel``, owned by the image's user, with
nothing in it; no ``/vercel/sandbox`` (only the legacy runtimes, ``POST /v2/sandboxes`` with a ``runtime``,
start there: docs "System Specifications"; the official mock still models them,
``packages/vercel-sandbox-mock/src/server/mock-server.ts`` ``DEFAULT_CWD``); ``LANG=C.UTF-8``; ``sudo`` that
asks no password and keeps the environment (``ubuntu ALL=(ALL) NOPASSWD:ALL``, ``Defaults !env_reset``);
``python``/``python3`` with ``pip`` where the image has them (universal, python), ``node`` where it has it
(universal, node). What it cannot be: the interpreters are this machine's (the images have Python 3.14 and
Node 24; the probe says which, so cassettes stay true to what ran), there is no ``uv`` unless this machine has
one, and commands run as this machine's user, not ``ubuntu``.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.server
import io
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

TOP = "/vercel"
# HOME and WORKDIR of every managed image (the driver gives neither): ``/vercel``, owned by the image's user
# ubuntu (github vercel/sandbox, images/ubuntu/Dockerfile: ``install -d -o ubuntu -g ubuntu /vercel``, ``usermod
# --home /vercel ubuntu``, ``ENV HOME=/vercel``, ``WORKDIR /vercel``; images/universal/Dockerfile the same at
# its end). Nothing in an image creates /vercel/sandbox: only the legacy runtimes' sessions start there
# (``LEGACY_CWD``). The stand-in's /vercel is a folder of its own; only paths under it reach the box's disk.
LEGACY_CWD = "/vercel/sandbox"
# The managed images (github vercel/sandbox ``packages/vercel-sandbox/src/constants.ts`` ``ManagedImage``,
# ``images/README.md``, ``images/docker-bake.hcl``: published as ``vcr.vercel.com/vercel/sandbox/<name>``) and what
# each has of the interpreters the stand-in can give: universal has Python 3.14 with pip and uv, and Node 24;
# python:3.14 Python with pip and uv; node:N Node and no Python; ubuntu and arch neither. A v3 create with no
# ``image`` gets universal (``sandbox.ts``: "If omitted, the sandbox uses vercel/sandbox/universal:latest").
IMAGES: dict[str, frozenset[str]] = {
    "universal": frozenset({"python", "node"}),
    "python:3.14": frozenset({"python"}),
    "node:22": frozenset({"node"}),
    "node:24": frozenset({"node"}),
    "node:26": frozenset({"node"}),
    "ubuntu": frozenset(),
    "arch": frozenset(),
}
DEFAULT_IMAGE = "universal"
# The legacy runtimes (``constants.ts`` ``RUNTIMES``), sent as ``runtime`` to ``POST /v2/sandboxes``
# (``api-client.ts`` ``createSandbox``: ``params.runtime === undefined ? "/v3/sandboxes" : "/v2/sandboxes"``).
RUNTIMES = frozenset({"node26", "node24", "node22", "python3.13"})
# The universal image's PATH (images/universal/Dockerfile ``ENV PATH="/vercel/.local/bin:/vercel/.global/pnpm/bin:
# /vercel/.global/npm/bin:${PATH}"``), before the stand-in's own folders of the image's programs.
IMAGE_PATH = ("/vercel/.local/bin", "/vercel/.global/pnpm/bin", "/vercel/.global/npm/bin")
# ``sudo`` as the images' sudoers make it (images/ubuntu/Dockerfile: ``ubuntu ALL=(ALL) NOPASSWD:ALL``,
# ``Defaults !env_reset``, ``Defaults always_set_home``): no password asked, the environment kept. Commands run as
# this machine's user here, so it runs the command as it is.
SUDO = """#!/bin/sh
while [ $# -gt 0 ]; do
    case $1 in
        -n|-E|-H|-S|-k) shift;;
        -u|-g) shift 2;;
        --) shift; break;;
        -*) echo "sudo: unknown option $1 (stand-in)" >&2; exit 1;;
        *) break;;
    esac
done
exec "$@"
"""
PYTHON = os.path.realpath(sys.executable)
BASE = "/var/tmp"  # not under /tmp, which each command sees as its sandbox's own
SESSIONS = "/v2/sandboxes/sessions/"
SNAPSHOTS = "/v2/sandboxes/snapshots"  # vercel-sandbox 0.10.0 ``query_snapshots``, ``get_snapshot``, ``delete_...``
DEFAULT_SNAPSHOT_EXPIRATION = 7 * 24 * 3600 * 1000  # ms: the stand-in's default snapshot lifetime (``_snapshot``)
# The API takes JSON bodies up to 1 MB: vercel-sandbox 0.10.0 sends stdin in 512 KiB chunks "keeping the base64 JSON
# body under the API's 1 MB limit" (``_internal/process_stdin.py``, STDIN_CHUNK_SIZE).
STDIN_BODY_LIMIT = 1024 * 1024
# A sandbox with transforms: the variables Vercel sets for its clients (see ``Sandbox``), naming the system bundle
# its CA is in; the bundle and the hosts' names bound in each command's mount namespace.
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TRUST_VARIABLES = (
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "NODE_EXTRA_CA_CERTS",
    "PIP_CERT",
    "REQUESTS_CA_BUNDLE",
    "SSL_CERT_FILE",
)
EGRESS_MOUNTS = f'mount --bind "$1" {SYSTEM_BUNDLE} && mount --bind "$2" /etc/hosts && shift 2'


class Command:
    """One process and its output, in order, as log lines."""

    def __init__(self, cmd_id: str, sandbox: Sandbox, body: dict[str, Any], stdin_timeout: float = 30.0) -> None:
        self.id = cmd_id
        self.session_id = sandbox.session_id
        self.body = body
        self.default_cwd = sandbox.cwd
        self.started = int(time.time() * 1000)
        self.began = time.monotonic()
        self.duration: float | None = None  # seconds from the command request to its exit (author.py paces by it)
        self.lines: list[dict[str, str]] = []
        self.cond = threading.Condition()
        self.exit_code: int | None = None
        args = [sandbox.map(a) for a in body.get("args", [])]
        path = ":".join([*(sandbox.map(folder) for folder in IMAGE_PATH), *sandbox.programs])
        env = {"PATH": path, "HOME": sandbox.top, "LANG": "C.UTF-8"}
        firewall = sandbox.firewall()
        if firewall is not None:
            env.update(dict.fromkeys(TRUST_VARIABLES, SYSTEM_BUNDLE))  # the VM's own, set by Vercel (see Sandbox)
        env.update(body.get("env", {}))
        # The VM's /tmp: the sandbox's own (every command of it sees the same one, as in one VM), never the host's,
        # bound at its real path in a mount namespace of the command's. The VM does not share the app's files.
        # No network unless the policy is allow-all: a deny-all VM reaches nothing, and a custom policy reaches
        # named hosts only by TLS SNI, which this stand-in has no firewall to tell (so it reaches nothing: where
        # it errs, it errs on the strict side); a sandbox with transforms reaches their hosts' firewall stand-in.
        policy = sandbox.body.get("networkPolicy") or {"mode": "allow-all"}
        isolate = [] if policy == {"mode": "allow-all"} or firewall is not None else ["-n"]
        # /opt/mainsdk too: the cell kernel's packages, which the driver installs there and cells name as they are.
        mounts = (
            'mount --bind "$1" /tmp && mount -t tmpfs none /opt && mkdir /opt/mainsdk '
            '&& mount --bind "$2" /opt/mainsdk && shift 2 && unset PWD && exec "$@"'
        )
        wrapper = ["unshare", "-m", *isolate, "sh", "-c", mounts, "sh", sandbox.tmp, sandbox.opt]
        if firewall is not None:
            # The firewall's CA in the system store and its hosts' names at its proxy: bound before the rest.
            bound = f'{EGRESS_MOUNTS} && exec "$@"'
            files = [str(firewall.bundle), str(firewall.hosts)]
            wrapper = ["unshare", "-m", "sh", "-c", bound, "sh", *files, *wrapper[2:]]
        # Live stdin (``attachStdin``): a pipe the stdin endpoint writes to; without it the command's stdin is empty.
        self.attached = body.get("attachStdin") is True
        self.stdin_written = 0  # bytes the command has received on its stdin (the endpoint's ``bytesWritten``)
        self.stdin_closed = False
        self.stdin_lock = threading.Lock()  # writes are applied one at a time, in the order received
        self.stdin_timeout = stdin_timeout
        self.proc = subprocess.Popen(
            [*wrapper, body["command"], *args],
            cwd=sandbox.map(body.get("cwd") or sandbox.cwd),
            env=env,
            stdin=subprocess.PIPE if self.attached else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, "stderr"), daemon=True),
        ]
        for reader in self.readers:
            reader.start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _read(self, pipe: Any, stream: str) -> None:
        for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
            with self.cond:
                self.lines.append({"stream": stream, "data": chunk.decode("utf-8", "replace")})
                self.cond.notify_all()

    def write_stdin(self, data: bytes, offset: int | None, close: bool) -> tuple[int, dict[str, Any] | None]:
        """One request to ``cmd/{id}/stdin``: the status and error, as the REST reference states its rules.

        Docs "Write to command stdin" (``POST /v2/sandboxes/sessions/{sessionId}/cmd/{cmdId}/stdin``): only a
        command started with ``attachStdin``; writes applied in the order received; a write returns once the
        command has accepted the data and fails with 504 after 30 s if it is not reading (the 504 carries
        ``bytesWritten``); with ``offset``, bytes the command already received are skipped and an offset past
        them is a 409; no ``data`` and no ``close`` writes nothing and answers ``bytesWritten``. A command that
        was never attached, has ended or closed its stdin is 400 ``command_stdin_unavailable`` (the code
        vercel-sandbox 0.10.0 reads as "not attached or stopped reading", ``_internal/process_stdin.py``).
        """
        with self.stdin_lock:
            unavailable = _error("command_stdin_unavailable", "The command's stdin is not available")
            if not self.attached or self.stdin_closed or self.exit_code is not None or self.proc.stdin is None:
                return 400, unavailable
            if offset is not None:
                if offset > self.stdin_written:
                    return 409, _error("stdin_offset_mismatch", f"offset {offset} is past {self.stdin_written}")
                data = data[self.stdin_written - offset :]
            fd = self.proc.stdin.fileno()
            os.set_blocking(fd, False)
            deadline = time.monotonic() + self.stdin_timeout
            view = memoryview(data)
            while view:
                try:
                    sent = os.write(fd, view)
                except BlockingIOError:
                    sent = 0
                except (BrokenPipeError, OSError):
                    return 400, unavailable  # the command stopped reading for good (it closed or ended)
                view = view[sent:]
                self.stdin_written += sent
                if view and time.monotonic() >= deadline:
                    timeout = _error("gateway_timeout", "The command did not read its stdin in time")
                    timeout["error"]["bytesWritten"] = self.stdin_written
                    return 504, timeout
                if view and not sent:
                    select.select([], [fd], [], min(0.1, max(deadline - time.monotonic(), 0.0)))
            if close:
                self.stdin_closed = True
                self.proc.stdin.close()
            return 200, None

    def _reap(self) -> None:
        code = self.proc.wait()
        for reader in self.readers:
            reader.join()
        with self.cond:
            self.duration = time.monotonic() - self.began
            self.exit_code = code if code >= 0 else 128 - code
            self.cond.notify_all()

    def view(self, finished: bool) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.body["command"],
            "args": self.body.get("args", []),
            "cwd": self.body.get("cwd") or self.default_cwd,
            "sessionId": self.session_id,
            "exitCode": self.exit_code if finished else None,
            "startedAt": self.started,
        }


class Sandbox:
    """A named sandbox and its one session: a folder standing for the session's ``/vercel``.

    ``image`` is a managed image's name (``IMAGES``) for a v3 create, or None for a legacy ``runtime`` (v2),
    whose session starts in ``/vercel/sandbox`` with Python and Node.
    """

    def __init__(
        self,
        name: str,
        session_id: str,
        body: dict[str, Any],
        pending: int = 1,
        image: str | None = DEFAULT_IMAGE,
        pip: str | None = None,
    ) -> None:
        self.name = name
        self.began = time.monotonic()
        self.lease: threading.Timer | None = None
        self.session_id = session_id
        self.body = body
        self.top = tempfile.mkdtemp(prefix="vercel-sim-", dir=BASE)  # /vercel: the image user's HOME and WORKDIR
        # The session's working folder (validators.ts ``Session.cwd``): the image's WORKDIR, which exists; a
        # legacy runtime's /vercel/sandbox, made for it.
        self.cwd = TOP if image is not None else LEGACY_CWD
        if image is None:
            os.mkdir(self.map(LEGACY_CWD))
        has = IMAGES[image] if image is not None else frozenset({"python", "node"})
        self.bin = tempfile.mkdtemp(prefix="vercel-sim-bin-", dir=BASE)
        # The VM's /tmp (1777, as every image's), empty when the sandbox is created.
        self.tmp = tempfile.mkdtemp(prefix="vercel-sim-tmp-", dir=BASE)
        os.chmod(self.tmp, 0o1777)
        self.opt = tempfile.mkdtemp(prefix="vercel-sim-opt-", dir=BASE)  # the VM's /opt/mainsdk, root's
        # Every image has bash and sudo (images/ubuntu/Dockerfile); node where the image has it.
        with open(os.path.join(self.bin, "sudo"), "w") as sudo:
            sudo.write(SUDO)
        os.chmod(os.path.join(self.bin, "sudo"), 0o755)
        links = {"bash": "/bin/bash", "node": shutil.which("node") if "node" in has else None}
        links["uv"] = shutil.which("uv") if "python" in has else None
        for name_, target in links.items():
            if target:
                os.symlink(target, os.path.join(self.bin, name_))
        # Python is the VM's own: an environment of this sandbox alone, so what a command installs into its
        # site-packages stays in this sandbox, as in a VM; ``python`` and ``python3`` both (python-is-python3),
        # and ``pip`` (python3-pip; images/universal/Dockerfile and images/python/Dockerfile remove
        # EXTERNALLY-MANAGED, so it installs for the user): this machine's pip, on the environment's path by a
        # .pth (``pip``), with the ``pip`` and ``pip3`` commands. The driver installs packages without it.
        self.venv = os.path.join(self.bin, "venv")
        self.programs = [self.bin]
        if "python" in has:
            subprocess.run([PYTHON, "-m", "venv", "--without-pip", self.venv], check=True, capture_output=True)
            self.programs.insert(0, os.path.join(self.venv, "bin"))
            if pip is not None:
                _add_pip(self.venv, pip)
        # The system's programs: this machine's /usr/local/bin and /usr/bin, less the interpreters the image does
        # not have (an image without Python finds no python3, as on Vercel: 127), linked in a folder of the box's.
        # The driver's own tools, found with ``command -p``, are the system's as they are in every image.
        missing = tuple(prefix for kind in ("python", "node") if kind not in has for prefix in HOST_PROGRAMS[kind])
        self.system: str | None = None
        if missing:
            self.system = tempfile.mkdtemp(prefix="vercel-sim-sys-", dir=BASE)
            _link_system(self.system, missing)
            self.programs.append(self.system)
        else:
            self.programs += ["/usr/local/bin", "/usr/bin", "/bin"]
        self.commands: dict[str, Command] = {}
        # Vercel's firewall ends TLS for the hosts with a transform, to set their headers (changelog "Safely inject
        # credentials in HTTP headers"; "selective TLS MITM: only domains with transform rules get terminated").
        # Its certificate is trusted the way Vercel does it, as e2b-dev/E2B issue 1160 describes Vercel's
        # approach (Vercel's docs and github vercel/sandbox say nothing of it): a per-sandbox CA "injected into
        # system trust store" and "env vars set for all common clients (NODE_EXTRA_CA_CERTS, SSL_CERT_FILE,
        # REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, PIP_CERT, etc.)". Here: the CA appended to the system bundle,
        # which every command's environment names (TRUST_VARIABLES), beneath what the command is given.
        # Such a sandbox reaches its transform hosts' stand-in (no -n), named in its own /etc/hosts.
        self.egress: Any = None  # made at the first command (``firewall``): a create alone needs none
        transforms = (
            {
                host: {k: v for t in rules[0].get("transform") or [] for k, v in (t.get("headers") or {}).items()}
                for host, rules in ((body.get("networkPolicy") or {}).get("allow") or {}).items()
                if isinstance(rules, list) and rules and isinstance(rules[0], dict) and rules[0].get("transform")
            }
            if isinstance((body.get("networkPolicy") or {}).get("allow"), dict)
            else {}
        )
        self.transforms = transforms
        self.egress_lock = threading.Lock()
        # A session is ``pending`` while its VM boots, and the create answers before it is ready: the official
        # Python client polls the sandbox until ``running`` (vercel-sandbox 0.10.0, ``_internal/service.py``,
        # ``_wait_for_ready_sandbox``: ready is running; stopped, failed and aborted are terminal; pending,
        # stopping and snapshotting are polled again every 0.5 s), and the session schema has ``pending``
        # (github vercel/sandbox, ``api-client/validators.ts``, ``Session.status``). The stand-in answers the
        # create and the next ``pending - 1`` reads of the session with ``pending``, then ``running``.
        self.pending = pending
        self.status = "pending" if pending > 0 else "running"
        self.settling = 0  # reads of a snapshot's source still answered ``snapshotting`` (``snapshot``)
        self.arm()
        self.created = int(time.time() * 1000)

    def firewall(self) -> Any:
        """The firewall stand-in for the transforms' hosts (None without any), made on first use: it needs
        ``cryptography``, which only a test that runs commands in such a sandbox (the egress authoring) has."""
        with self.egress_lock:
            if self.transforms and self.egress is None:
                from mainsdk_conformance.egress_standin import TlsEgress

                number = 0x100 + int(self.session_id[-4:])
                self.egress = TlsEgress(Path(self.top), number, self.transforms, "vercel-sim")
            return self.egress

    def map(self, path: str) -> str:
        """A sandbox path in the host folder (only /vercel is the box's own; other paths are the host's)."""
        return self.top + path[len(TOP) :] if path == TOP or path.startswith(TOP + "/") else path

    def exists(self, folder: str) -> bool:
        """Whether ``folder`` (absolute) is a folder of the box: under /vercel, or /tmp, or the system's."""
        if folder in ("/tmp", "/opt") or folder.startswith("/tmp/"):
            return folder in ("/tmp", "/opt") or os.path.isdir(self.tmp + folder[len("/tmp") :])
        return os.path.isdir(self.map(folder))

    def arm(self) -> None:
        """Stop the sandbox when its timeout (the create's, plus every extension) runs out, as Vercel does."""
        if self.lease is not None:
            self.lease.cancel()
        left = self.body.get("timeout", 300000) / 1000 - (time.monotonic() - self.began)
        self.lease = threading.Timer(max(left, 0.0), self.stop)
        self.lease.daemon = True
        self.lease.start()

    def read_status(self) -> None:
        """A read of the session (by session id or sandbox name): one step nearer ``running`` while pending,
        and nearer ``stopped`` while snapshotting."""
        if self.status == "pending":
            self.pending -= 1
            if self.pending <= 0:
                self.status = "running"
        elif self.status == "snapshotting":
            self.settling -= 1
            if self.settling <= 0:
                self.status = "stopped"

    def snapshot(self, folder: str) -> None:
        """Keep the filesystem in ``folder`` (its /vercel and /tmp), then stop: a snapshot stops its source.

        vercel-sandbox 0.10.0 ``_internal/api_client.py`` ``create_snapshot``: ``POST .../snapshot`` answers
        ``{snapshot, session}``, and the session is ``snapshotting`` (``_internal/models.py`` ``SandboxStatus``),
        then ``stopped``: what ran in it is gone (Vercel's snapshot is of the filesystem only). The stand-in
        answers ``snapshotting`` to the snapshot and the next read, then ``stopped``.
        """
        shutil.copytree(self.top, os.path.join(folder, "top"), symlinks=True)
        shutil.copytree(self.tmp, os.path.join(folder, "tmp"), symlinks=True)
        self.stop()
        self.status = "snapshotting"
        self.settling = 2  # the snapshot's answer and the next read: ``snapshotting``

    def restore(self, folder: str) -> None:
        """Start with a snapshot's filesystem (a create whose ``source`` is ``{type: "snapshot", snapshotId}``)."""
        shutil.copytree(os.path.join(folder, "top"), self.top, symlinks=True, dirs_exist_ok=True)
        shutil.copytree(os.path.join(folder, "tmp"), self.tmp, symlinks=True, dirs_exist_ok=True)

    def session_view(self) -> dict[str, Any]:
        return {
            "id": self.session_id,
            "sourceSandboxName": self.name,
            "projectId": self.body.get("projectId"),
            "memory": 4096,
            "vcpus": self.body.get("resources", {}).get("vcpus", 2),
            "region": "iad1",
            "timeout": self.body.get("timeout", 300000),
            "status": self.status,
            "requestedAt": self.created,
            "startedAt": self.created,
            "createdAt": self.created,
            "updatedAt": self.created,
            "cwd": self.cwd,
            "networkPolicy": _policy_readback(self.body.get("networkPolicy")),
        }

    def sandbox_view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "currentSessionId": self.session_id,
            "projectId": self.body.get("projectId"),
            "persistent": self.body.get("persistent", True),
            "status": self.status,
            "tags": self.body.get("tags") or {},
            "createdAt": self.created,
            "updatedAt": self.created,
        }

    def stop(self) -> None:
        if self.lease is not None:
            self.lease.cancel()
        if self.status in ("stopped", "snapshotting"):
            return
        self.status = "stopped"
        for command in self.commands.values():
            if command.proc.poll() is None:
                command.proc.kill()
        # What the code left in the background dies with the VM: whatever names the folder, or works in it (a
        # child a command started keeps its cwd there).
        subprocess.run(["pkill", "-KILL", "-f", self.top], check=False)
        _kill_working_in(self.top)
        if self.egress is not None:
            self.egress.close()
        shutil.rmtree(self.top, ignore_errors=True)
        shutil.rmtree(self.bin, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.opt, ignore_errors=True)
        if self.system is not None:
            shutil.rmtree(self.system, ignore_errors=True)


def _policy_readback(policy: Any) -> Any:
    """The policy as the API reads it back: modes as they are; an ``allow`` list or record as ``custom``.

    The request takes ``{"mode": ...}`` or ``{"allow": ..., "subnets": ...}``
    (``NetworkPolicyRequestValidator``); the answer uses the legacy readback
    ``{"mode": "custom", "allowedDomains": [...]}`` (``NetworkPolicyResponseValidator``).
    """
    if not isinstance(policy, dict) or "mode" in policy:
        return policy or {"mode": "allow-all"}
    allow = policy.get("allow") or []
    readback: dict[str, Any] = {"mode": "custom", "allowedDomains": list(allow)}
    # Header injection reads back as names only (github vercel/sandbox utils/network-policy.ts fromAPINetworkPolicy:
    # "The API returns headerNames (secret values are stripped)"; vercel-sandbox 0.10.0 models.py
    # NetworkPolicyInjectionRuleSummary): never a value in an answer.
    injections = [
        {"domain": domain, "headerNames": list(transform.get("headers") or {})}
        for domain, rules in (allow.items() if isinstance(allow, dict) else ())
        for rule in rules
        for transform in rule.get("transform") or ()
    ]
    if injections:
        readback["injectionRules"] = injections
    return readback


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _string_record(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def policy_problem(policy: Any) -> str | None:
    """Why a create's ``networkPolicy`` is refused, or None: held to the request schema Vercel's client checks.

    Vercel's server is not public; the strictest rule at hand is github vercel/sandbox
    ``packages/vercel-sandbox/src/api-client/validators.ts`` ``NetworkPolicyRequestValidator``: a mode
    (``allow-all`` / ``deny-all``), or ``{allow, subnets}`` with ``allow`` a list of domains or a record of
    domain to rules; each rule ``{match?, transform?, forwardURL?}`` with exactly one of ``transform`` and
    ``forwardURL`` (vercel-sandbox 0.10.0 ``NetworkPolicyRule`` adds ``response`` as a third); a transform
    ``{headers?: {string: string}}``. Which status and words the API answers is unverified: 400 ``bad_request``.
    """
    if policy is None:
        return None
    if not isinstance(policy, dict):
        return "networkPolicy must be an object"
    if "mode" in policy:
        return (
            None if policy["mode"] in ("allow-all", "deny-all") else "networkPolicy.mode must be allow-all or deny-all"
        )
    allow = policy.get("allow")
    if allow is not None and not _strings(allow):
        if not isinstance(allow, dict):
            return "networkPolicy.allow must be a list of domains or a record of domain to rules"
        for domain, rules in allow.items():
            if not isinstance(rules, list):
                return f"networkPolicy.allow[{domain}] must be a list of rules"
            for rule in rules:
                if not isinstance(rule, dict):
                    return f"networkPolicy.allow[{domain}]: a rule must be an object"
                handlers = [key for key in ("transform", "forwardURL", "response") if rule.get(key) is not None]
                if len(handlers) != 1:
                    return f"networkPolicy.allow[{domain}]: a rule needs exactly one of transform or forwardURL"
                transforms = rule.get("transform")
                if transforms is not None:
                    if not isinstance(transforms, list):
                        return f"networkPolicy.allow[{domain}].transform must be a list"
                    for transform in transforms:
                        headers = transform.get("headers") if isinstance(transform, dict) else None
                        if not isinstance(transform, dict) or (headers is not None and not _string_record(headers)):
                            return f"networkPolicy.allow[{domain}].transform: headers must map strings to strings"
    subnets = policy.get("subnets")
    if subnets is not None and (
        not isinstance(subnets, dict) or any(not _strings(subnets[key]) for key in ("allow", "deny") if key in subnets)
    ):
        return "networkPolicy.subnets must be {allow?: [cidr], deny?: [cidr]}"
    return None


class Simulator:
    """The endpoints our driver and Vercel's own clients use, on 127.0.0.1."""

    def __init__(self, token: str = "simulator-token", pending: int = 1, max_duration: float = 45 * 60.0) -> None:
        self.token = token
        # The longest a sandbox may live from its start: the plan's (45 minutes on Hobby, 24 hours on Pro and
        # Enterprise: github vercel/sandbox, packages/vercel-sandbox/README.md "Limitations"; docs "Pricing and
        # Limits"). A create asking for more, or an extension past it, is refused (with which status and words
        # is unverified: the stand-in answers 400); the sandbox stops at its timeout, which cannot pass it.
        self.max_duration = max_duration
        self.stdin_timeout = 30.0  # seconds a stdin write waits for a command that is not reading (docs: 30 s)
        self.pending = pending  # reads of a new session answered ``pending`` (the create's answer included)
        self.sandboxes: dict[str, Sandbox] = {}  # by session id
        self.deleted: list[Sandbox] = []  # sandboxes a ``DELETE /v2/sandboxes/{name}`` removed (their commands ran)
        # Snapshots by id: each a folder of the filesystem it keeps, and its view (``_SnapshotPayload``).
        self.snapshots: dict[str, tuple[str, dict[str, Any]]] = {}
        self.snapshot_folder = tempfile.mkdtemp(prefix="vercel-sim-snapshots-", dir=BASE)
        self.pip = shared_pip()  # this machine's pip, for the images with python3-pip
        self.ids = itertools.count(1)
        self.requests: list[dict[str, Any]] = []  # every request, for comparing clients: method, path, query, body
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        for sandbox in self.sandboxes.values():
            sandbox.stop()
        self.server.shutdown()
        self.server.server_close()
        if self.pip is not None:
            shutil.rmtree(self.pip, ignore_errors=True)
        shutil.rmtree(self.snapshot_folder, ignore_errors=True)

    def durations(self) -> dict[str, float]:
        """Each finished command's run time, by command id (ids are unique within one simulator)."""
        return {
            cmd_id: command.duration
            for sandbox in [*self.sandboxes.values(), *self.deleted]
            for cmd_id, command in sandbox.commands.items()
            if command.duration is not None
        }

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        sim = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                sim.handle(self)

            do_POST = do_GET
            do_DELETE = do_GET

        return Handler

    def handle(self, h: http.server.BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        query = parse_qs(parts.query)
        body = self._body(h)
        self.requests.append(
            {
                "method": h.command,
                "path": parts.path,
                "query": {k: v[0] for k, v in query.items()},
                "headers": {k.lower(): v for k, v in h.headers.items()},
                "body": body,
            }
        )
        if h.headers.get("authorization") != f"Bearer {self.token}":
            # What Vercel's API answers a token it does not know (providers.md): 403, not 401.
            return _json(h, 403, {"error": {"code": "forbidden", "message": "Not authorized", "invalidToken": True}})
        path = parts.path
        if path in ("/v3/sandboxes", "/v2/sandboxes") and h.command == "POST":
            return self._create(h, json.loads(body), legacy=path == "/v2/sandboxes")
        if path == SNAPSHOTS or path.startswith(SNAPSHOTS + "/"):
            return self._snapshots(h, path.removeprefix(SNAPSHOTS).strip("/"))
        if path.startswith("/v2/sandboxes/") and not path.startswith(SESSIONS):
            name = path.removeprefix("/v2/sandboxes/")
            found = next((s for s in self.sandboxes.values() if s.name == name), None)
            if found is None:
                return _json(h, 404, _error("sandbox_not_found", "Sandbox not found"))
            if h.command == "DELETE":
                # vercel-sandbox ``destroy_sandbox``: the sandbox goes, its snapshots stay (no
                # ``deleteOrphanSnapshots``). While it snapshots, it is refused (status unverified: 422, strict).
                if found.status == "snapshotting":
                    return _json(h, 422, _error("sandbox_snapshotting", "Sandbox is snapshotting"))
                found.stop()
                self.deleted.append(self.sandboxes.pop(found.session_id))
                return _json(h, 200, {"sandbox": found.sandbox_view()})
            found.read_status()
            return _json(h, 200, {"sandbox": found.sandbox_view(), "session": found.session_view(), "routes": []})
        if not path.startswith(SESSIONS):
            return _json(h, 404, _error("not_found", "no such endpoint"))
        segments = path.removeprefix(SESSIONS).split("/")
        sandbox = self.sandboxes.get(segments[0])
        if sandbox is None:
            return _json(h, 404, _error("sandbox_not_found", "Sandbox not found"))
        return self._session(h, sandbox, segments[1:], query, body)

    @staticmethod
    def _body(h: http.server.BaseHTTPRequestHandler) -> bytes:
        if h.headers.get("transfer-encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(h.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    h.rfile.readline()
                    return data
                data += h.rfile.read(size)
                h.rfile.readline()
        return h.rfile.read(int(h.headers.get("content-length") or 0))

    def _create(self, h: http.server.BaseHTTPRequestHandler, request: dict[str, Any], legacy: bool = False) -> None:
        problem = policy_problem(request.get("networkPolicy"))
        if problem is not None:
            return _json(h, 400, _error("bad_request", problem))
        # v3 takes an ``image``, v2 a legacy ``runtime`` (api-client.ts ``createSandbox`` picks the endpoint by
        # whether a runtime is given). Which words and status the service answers for an unknown one is
        # unverified: 400 for a runtime it does not have, 404 for an image no registry holds.
        image: str | None = None
        if legacy:
            runtime = request.get("runtime")
            if runtime not in RUNTIMES or request.get("image") is not None:
                return _json(h, 400, _error("bad_request", f"runtime {runtime!r} is not one of {sorted(RUNTIMES)}"))
        else:
            if request.get("runtime") is not None:
                return _json(h, 400, _error("bad_request", "v3 takes an image, not a runtime"))
            image = managed_image(request.get("image"))
            if image is None:
                # A name that is not vercel/sandbox/<managed> is a repository of the project's own registry
                # (sandbox.ts ``image``: "A bare repository name resolves to the latest tag"); the stand-in's
                # projects have none.
                name = request.get("image")
                return _json(h, 404, _error("image_not_found", f"Image {name!r} not found in the project's registry"))
        if request.get("timeout", 300000) > self.max_duration * 1000:
            return _json(h, 400, _error("bad_request", "timeout exceeds the plan's maximum sandbox duration"))
        source = request.get("source")
        kept: str | None = None
        if source is not None:
            # ``SnapshotSource`` (vercel-sandbox ``_internal/models.py``): ``{type: "snapshot", snapshotId}``. A
            # deleted or expired snapshot is refused (status unverified: 404, as ``GET /snapshots/{id}``).
            found = self._live_snapshot(source.get("snapshotId")) if isinstance(source, dict) else None
            if found is None or source.get("type") != "snapshot":
                return _json(h, 404, _error("snapshot_not_found", "Snapshot not found"))
            kept = found[0]
        number = next(self.ids)
        name = request.get("name") or f"sbx-sim{number:04d}"
        if any(s.name == name for s in self.sandboxes.values()):
            return _json(h, 409, _error("sandbox_exists", "A sandbox with this name already exists"))
        created = Sandbox(name, f"sess_sim{number:04d}", request, self.pending, image=image, pip=self.pip)
        if kept is not None:
            created.restore(kept)
        self.sandboxes[created.session_id] = created
        return _json(h, 200, {"sandbox": created.sandbox_view(), "session": created.session_view(), "routes": []})

    def _live_snapshot(self, snapshot_id: Any) -> tuple[str, dict[str, Any]] | None:
        """A snapshot that is neither deleted nor expired, or None."""
        found = self.snapshots.get(snapshot_id) if isinstance(snapshot_id, str) else None
        if found is None or found[1]["status"] != "created":
            return None
        expires = found[1].get("expiresAt")
        return None if expires and expires <= time.time() * 1000 else found

    def _snapshot(self, h: http.server.BaseHTTPRequestHandler, sandbox: Sandbox, request: dict[str, Any]) -> None:
        """``POST /v2/sandboxes/sessions/{id}/snapshot`` ``{expiration?}``: the snapshot, and the stopped source.

        ``expiration`` in ms, 0 for never (vercel-sandbox ``SnapshotExpiration``: zero disables it). Without
        one, Vercel's default applies; the stand-in takes 7 days, the figure Vercel's users quote (which one
        the service applies is unverified).
        """
        number = next(self.ids)
        snapshot_id = f"snap_sim{number:04d}"
        folder = os.path.join(self.snapshot_folder, snapshot_id)
        sandbox.snapshot(folder)
        now = int(time.time() * 1000)
        expiration = request.get("expiration", DEFAULT_SNAPSHOT_EXPIRATION)
        view = {
            "id": snapshot_id,
            "sourceSessionId": sandbox.session_id,
            "region": "iad1",
            "status": "created",
            "sizeBytes": sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file() and not f.is_symlink()),
            "expiresAt": now + expiration if expiration else None,
            "createdAt": now,
            "updatedAt": now,
        }
        self.snapshots[snapshot_id] = (folder, view)
        return _json(h, 200, {"snapshot": view, "session": sandbox.session_view()})

    def _snapshots(self, h: http.server.BaseHTTPRequestHandler, snapshot_id: str) -> None:
        """``GET /v2/sandboxes/snapshots`` (the live ones), ``GET``/``DELETE .../snapshots/{id}``
        (vercel-sandbox ``query_snapshots``, ``get_snapshot``, ``delete_snapshot``): a deleted or expired one
        is not found."""
        if not snapshot_id and h.command == "GET":
            live = [view for _, view in self.snapshots.values() if self._live_snapshot(view["id"]) is not None]
            return _json(h, 200, {"snapshots": live, "pagination": {"count": len(live), "next": None}})
        found = self._live_snapshot(snapshot_id)
        if found is None or h.command not in ("GET", "DELETE"):
            return _json(h, 404, _error("snapshot_not_found", "Snapshot not found"))
        folder, view = found
        if h.command == "DELETE":
            view["status"] = "deleted"
            view["updatedAt"] = int(time.time() * 1000)
            shutil.rmtree(folder, ignore_errors=True)
        return _json(h, 200, {"snapshot": view})

    def _session(
        self,
        h: http.server.BaseHTTPRequestHandler,
        sandbox: Sandbox,
        rest: list[str],
        query: dict[str, list[str]],
        body: bytes,
    ) -> None:
        if rest == []:
            # GET /v2/sandboxes/sessions/{id} (@vercel/sandbox ``api-client.ts`` ``getSession``).
            sandbox.read_status()
            return _json(h, 200, {"session": sandbox.session_view(), "routes": []})
        if sandbox.status == "pending" and rest != ["stop"]:
            # Nothing runs in a VM still booting. Which answer the service gives a request sent too early is
            # unverified (README); the stand-in refuses it, the strict side, so a client that does not wait fails.
            return _json(h, 422, _error("sandbox_not_running", "Sandbox is pending, not running"))
        if sandbox.status in ("stopped", "snapshotting") and rest != ["stop"]:
            return _json(h, 410, _error("sandbox_stopped", "Sandbox is stopped"))
        if rest == ["snapshot"] and h.command == "POST":
            return self._snapshot(h, sandbox, json.loads(body or b"{}"))
        if rest == ["stop"]:
            sandbox.stop()
            return _json(h, 200, {"session": sandbox.session_view(), "sandbox": sandbox.sandbox_view()})
        if rest == ["extend-timeout"]:
            timeout = sandbox.body.get("timeout", 300000) + json.loads(body)["duration"]
            if timeout > self.max_duration * 1000:
                return _json(h, 400, _error("bad_request", "the extension passes the plan's maximum sandbox duration"))
            sandbox.body["timeout"] = timeout
            sandbox.arm()
            return _json(h, 200, {"session": sandbox.session_view()})
        if rest == ["fs", "write"]:
            # The archive is extracted at ``x-cwd`` (the official clients send ``/`` and names relative to it:
            # ``session.ts`` ``writeFiles`` ``extractDir: "/"``, ``utils/normalizePath.ts``); the mock defaults to
            # ``/``. Extracting into a folder that is not there fails as ``tar -C`` does: refused here (which
            # status the service answers is unverified; 400, the strict side).
            cwd = h.headers.get("x-cwd", "/")
            if not cwd.startswith("/") or not sandbox.exists(cwd):
                return _json(h, 400, _error("bad_request", f"x-cwd {cwd!r} is not a folder in the sandbox"))
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(body))) as archive:
                archive.extractall(sandbox.top, filter=_under_root(cwd, sandbox))
            return _json(h, 200, {})
        if rest == ["fs", "read"]:
            request = json.loads(body)
            path = Path(sandbox.map(os.path.join(request.get("cwd") or sandbox.cwd, request["path"])))
            if not path.is_file():
                return _json(h, 404, _error("file_not_found", "File not found"))
            data = path.read_bytes()
            h.send_response(200)
            h.send_header("content-type", "application/octet-stream")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return None
        if rest == ["cmd"] and h.command == "POST":
            request = json.loads(body)
            # No ``cwd``: the session's (the image's WORKDIR, validators.ts ``Session.cwd``; the mock's
            # ``body.cwd ?? session.cwd``). A ``cwd`` that is not a folder cannot be a process's working folder:
            # refused before anything runs (the status is unverified: 400, the strict side).
            cwd = request.get("cwd")
            if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/") or not sandbox.exists(cwd)):
                return _json(h, 400, _error("bad_request", f"cwd {cwd!r} is not a folder in the sandbox"))
            started = Command(f"cmd_sim{next(self.ids):04d}", sandbox, request, self.stdin_timeout)
            sandbox.commands[started.id] = started
            if request.get("wait"):
                return self._run(h, started, logs=bool(request.get("logs")))
            return _json(h, 200, {"command": started.view(False)})
        command = sandbox.commands.get(rest[1]) if len(rest) >= 2 and rest[0] == "cmd" else None
        if command is None:
            return _json(h, 404, _error("command_not_found", "Command not found"))
        if rest[2:] == [] and h.command == "GET":
            if query.get("wait") == ["true"]:
                with command.cond:
                    command.cond.wait_for(lambda: command.exit_code is not None)
            return _json(h, 200, {"command": command.view(command.exit_code is not None)})
        if rest[2:] == ["kill"]:
            # The one process the command started: the API kills a command, not its process group.
            if command.proc.poll() is None:
                os.kill(command.proc.pid, int(json.loads(body or b"{}").get("signal", signal.SIGTERM)))
            return _json(h, 200, {"command": command.view(command.exit_code is not None)})
        if rest[2:] == ["logs"]:
            return self._stream(h, command, lines=True, ends=False)
        if rest[2:] == ["stdin"] and h.command == "POST":
            if len(body) > STDIN_BODY_LIMIT:
                return _json(h, 413, _error("payload_too_large", "The request body is over 1 MB"))
            request = json.loads(body or b"{}")
            data = base64.b64decode(request.get("data") or "", validate=True)
            offset = request.get("offset")
            status, error = command.write_stdin(
                data, offset if isinstance(offset, int) else None, request.get("close") is True
            )
            if error is not None:
                return _json(h, status, error)
            finished = command.exit_code is not None
            return _json(h, 200, {"command": command.view(finished), "bytesWritten": command.stdin_written})
        return _json(h, 404, _error("not_found", "no such endpoint"))

    def _run(self, h: http.server.BaseHTTPRequestHandler, command: Command, logs: bool) -> None:
        """``cmd`` with ``wait``: the command, (with ``logs``) its log lines, then the command with its exit code."""
        self._stream(h, command, lines=logs, ends=True)

    def _stream(self, h: http.server.BaseHTTPRequestHandler, command: Command, *, lines: bool, ends: bool) -> None:
        h.send_response(200)
        h.send_header("content-type", "application/x-ndjson")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()

        def send(value: Any) -> None:
            data = (json.dumps(value) + "\n").encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        try:
            if ends:
                send({"command": command.view(False)})
            sent = 0
            while True:
                with command.cond:
                    command.cond.wait_for(lambda s=sent: len(command.lines) > s or command.exit_code is not None)  # type: ignore[misc]
                    fresh = command.lines[sent:]
                    done = command.exit_code is not None and len(command.lines) == sent + len(fresh)
                if lines:
                    for line in fresh:
                        send(line)
                h.wfile.flush()
                sent += len(fresh)
                if done:
                    break
            if ends:
                send({"command": command.view(True)})
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up (a timeout): the command runs on, as on Vercel


def managed_image(name: Any) -> str | None:
    """The managed image (``IMAGES``) a v3 ``image`` names, or None. No image: the default, universal.

    ``vercel/sandbox/<image>`` (``sandbox.ts`` ``SandboxImage``), or fully qualified with the registry
    (``vcr.vercel.com/...``, images/docker-bake.hcl ``REGISTRY``); a name without a tag is its ``latest``
    (only universal, ubuntu and arch are published as latest: python is 3.14, node 22, 24 and 26).
    """
    if name is None:
        return DEFAULT_IMAGE
    if not isinstance(name, str):
        return None
    rest = name.removeprefix("vcr.vercel.com/").removeprefix("vercel/sandbox/")
    if rest == name.removeprefix("vcr.vercel.com/"):
        return None  # not under vercel/sandbox/: the project's registry
    rest = rest.removesuffix(":latest")
    return rest if rest in IMAGES else None


HOST_PROGRAMS = {
    "python": ("python", "pip", "pydoc", "2to3", "idle", "uv"),
    "node": ("node", "nodejs", "npm", "npx", "corepack"),
}


def _link_system(folder: str, missing: tuple[str, ...]) -> None:
    """Link this machine's system programs into ``folder``, but those whose names start with ``missing``."""
    for source in ("/usr/local/bin", "/usr/bin", "/bin"):
        with contextlib.suppress(OSError):
            for entry in os.listdir(source):
                target = os.path.join(folder, entry)
                if not entry.startswith(missing) and not os.path.lexists(target):
                    os.symlink(os.path.join(source, entry), target)


def shared_pip() -> str | None:
    """A copy of this machine's pip, for the boxes' Pythons (``_add_pip``); None when it has none."""
    import importlib.util

    spec = importlib.util.find_spec("pip")
    if spec is None or spec.origin is None:
        return None
    folder = tempfile.mkdtemp(prefix="vercel-sim-pip-", dir=BASE)
    shutil.copytree(os.path.dirname(spec.origin), os.path.join(folder, "pip"))
    return folder


def _add_pip(venv: str, pip: str) -> None:
    """``pip`` in a box's Python: the shared copy on its path, and the ``pip``/``pip3`` commands."""
    purelib = subprocess.run(
        [os.path.join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(purelib, "mainsdk-sim-pip.pth").write_text(pip + "\n")
    for name in ("pip", "pip3"):
        script = Path(venv, "bin", name)
        script.write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n')
        script.chmod(0o755)


def _kill_working_in(folder: str) -> None:
    """SIGKILL every process whose working folder is ``folder`` or under it (the VM's processes, as it stops)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if cwd == folder or cwd.startswith(folder + "/"):
            with contextlib.suppress(OSError):
                os.kill(int(entry.name), signal.SIGKILL)


def _under_root(cwd: str, sandbox: Sandbox) -> Any:
    """A tar filter extracting at ``cwd`` (``x-cwd``) inside the sandbox's /vercel; nothing lands outside it.

    Folders a name needs are made as tar makes them (the official mock: ``fs.mkdir(dir, {recursive: true})``
    per entry, ``mock-server.ts``), as the image's user, who owns /vercel.
    """

    def keep(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        full = os.path.normpath(os.path.join(cwd, member.name))
        if full != TOP and not full.startswith(TOP + "/"):
            return None  # outside /vercel: the stand-in keeps only its one folder (the image user's own)
        member = member.replace(name=full[len(TOP) :].lstrip("/") or ".", deep=False)
        return tarfile.data_filter(member, sandbox.top)

    return keep


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _json(h: http.server.BaseHTTPRequestHandler, status: int, value: Any) -> None:
    data = json.dumps(value).encode()
    h.send_response(status)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
