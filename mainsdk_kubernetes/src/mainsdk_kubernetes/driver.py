"""The kubernetes driver: each run and each session is a pod claimed from an agent-sandbox warm pool.

A box is a ``SandboxClaim`` on ``sandbox.kubernetes.warm_pool`` (``cluster.py``), made ready on one watch, and the
sandboxd of the pod adopted for it (``sandboxd.py``): files in over its REST API, each command one gRPC ``Start``
stream, killed by process group (``SendSignal``), the out folder back as one tar stream. The claim is deleted at
the end (``shutdownPolicy: Delete``): the pod goes with it, and everything it ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from decimal import Decimal

import attrs
import grpc
import grpc.aio
import httpx
from kubernetes import client as k8s
from kubernetes import config as kubeconfig
from mainsdk.config import AppConfig
from mainsdk.driver import (
    DRIVER_UNAVAILABLE,
    INVALID_OPTION,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    NetworkPolicy,
    NetworkReach,
    OutputSink,
    SandboxError,
    SessionDriver,
)
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.hostbox import collect_folder

from mainsdk_kubernetes.cluster import Claimed, Cluster, Template, oom_killed
from mainsdk_kubernetes.config import KubernetesConfig
from mainsdk_kubernetes.network import EXTRA_REACH, GROUP, PORTS, VERSION, cilium_egress, cilium_policy, selector_labels
from mainsdk_kubernetes.sandboxd import Process, Route, Sandboxd, StreamBroken

__all__ = ["KubernetesBox", "KubernetesDriver", "driver_from_config", "isolation_of"]

BASELINE = ("PATH", "HOME", "LC_CTYPE")  # what a command keeps of the container's own environment, unless given
# RuntimeClass handlers by what they isolate with. Kata Containers and Firecracker run each pod in its own VM
# (its own kernel): microvm. gVisor (runsc) runs it on a user-space kernel that intercepts its system calls:
# stronger than a container's namespaces, but no hardware boundary, so it is told as "namespace", never more.
MICROVM = re.compile(r"kata.*|.*firecracker.*|fc")
GVISOR = re.compile(r"runsc.*|gvisor")
RUNC = frozenset({"runc", "crun"})
COLLECT_SLACK = 1024 * 1024  # tar's own bytes (headers, padding) read past max_bytes before the archive is cut

# Every command runs under this fixed script (no caller text is ever spliced into it; everything comes as an
# argument): it makes the work and out folders, starts in the work folder, and drops every variable of the
# container's environment that the command was not given (sandboxd merges ProcessConfig.env_vars over its own,
# packages/sandboxd/pkg/server/process.go), then execs the program, which stays the leader of the process group
# sandboxd made for it: SendSignal kills that group. Tools are found with ``command -p`` (the system's PATH).
#   $0 the names to keep, $1 the root, then the program and its arguments
WRAPPER = (
    'keep=" $0 " root=$1; shift\n'
    'command -p mkdir -p "$root/work" "$root/out" && cd "$root/work" || exit 125\n'
    "drop=; for n in $(command -p env | command -p sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p'); do\n"
    '  case $keep in *" $n "*) ;; *) drop="$drop -u $n";; esac\n'
    "done\n"
    'exec "$(command -pv env)" $drop "$@"\n'
)
# The out folder as one tar stream: tar stores a link as a link, never following it.
ARCHIVE = 'cd "$0/out" 2>/dev/null || exit 0; exec tar -cf - .'

Address = Callable[[str, int], str]  # (pod IP or service name, port) to the host:port to dial


def isolation_of(template: Template, config: KubernetesConfig) -> str:
    """What a template's pods isolate with, from its RuntimeClass's handler; plain runc only where allowed."""
    handler = template.handler
    if handler is not None and handler in config.runtime_isolation:
        return config.runtime_isolation[handler]
    if handler is None or handler in RUNC:
        if config.allow_runc:
            return "namespace"
        raise SandboxError(
            INVALID_OPTION,
            f"kubernetes: template {template.name} runs its pods with "
            f"{'no RuntimeClass' if handler is None else 'the ' + handler + ' handler'} (plain runc: a container "
            "sharing the node's kernel); give it a RuntimeClass of Kata Containers or gVisor, or set "
            "sandbox.kubernetes.allow_runc: true to accept namespace isolation",
        )
    if MICROVM.fullmatch(handler):
        return "microvm"
    if GVISOR.fullmatch(handler):
        return "namespace"
    raise SandboxError(
        INVALID_OPTION,
        f"kubernetes: template {template.name}'s RuntimeClass {template.runtime_class} has handler {handler!r}, "
        "which this driver does not know; say what it isolates with in sandbox.kubernetes.runtime_isolation "
        f"({handler}: microvm or namespace)",
    )


@attrs.define(eq=False)
class KubernetesBox:
    """A box: its spec, its ready claim and the sandboxd of its pod."""

    id: str
    spec: BoxSpec
    claimed: Claimed
    sandboxd: Sandboxd
    policy: str | None = None  # the CiliumNetworkPolicy made for its pod, deleted with it


def claim_name(box_id: str) -> str:
    """The claim's name for a box id: a DNS label (``run_1f2e...`` becomes ``mainsdk-run-1f2e...``)."""
    return ("mainsdk-" + re.sub(r"[^a-z0-9-]", "-", box_id.lower()))[:63].rstrip("-")


@attrs.define
class KubernetesDriver:
    """The kubernetes driver's hooks (``SessionDriver[KubernetesBox]``)."""

    config: KubernetesConfig
    cluster: Cluster
    address: Address
    languages: frozenset[str]
    http: httpx.AsyncClient | None = None
    _template: Template | None = None
    _isolation: str | None = None
    _cilium: bool | None = None

    def template(self) -> Template:
        """The warm pool's template, read once per driver (three requests: the pool, its template, its
        RuntimeClass); what a claimed pod really runs with is checked on every claim (start)."""
        if self._template is None:
            if not self.config.warm_pool:
                raise SandboxError(
                    INVALID_OPTION,
                    "kubernetes: sandbox.kubernetes.warm_pool is not set; name the SandboxWarmPool to claim pods of",
                )
            template = self.cluster.template_now(self.config.warm_pool, self.config.runtime_isolation)
            self._isolation = isolation_of(template, self.config)
            self._template = template
        return self._template

    def _known(self) -> Template | None:
        """The template, or None while the API server cannot be reached (start then fails as an outage)."""
        try:
            return self.template()
        except SandboxError as exc:
            if exc.code == DRIVER_UNAVAILABLE:
                return None
            raise

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        """Pods of the warm pool's template: isolation from its RuntimeClass, memory from its limits, no egress.

        While the API server is unreachable it claims the least (namespace isolation, no memory limit): the
        start hook reads the template again and fails as an outage, before anything runs.
        """
        template = self._known()
        isolation = self._isolation or "namespace"
        memory = template is not None and template.memory_limit is not None
        cilium = self.config.network == "cilium"
        return Capabilities(
            network=cilium,
            wildcard_hosts=cilium,
            network_reach=NetworkReach(filtered=PORTS, extra=EXTRA_REACH) if cilium else None,
            isolation=isolation,  # type: ignore[arg-type]
            languages=self.languages,
            memory_limit=memory,
            memory_limit_scope="tree" if memory else None,
            sessions=True,
            private_tmp=True,  # a pod per run and per session: its container's /tmp and HOME are its own
            background=True,
            # The cell kernel is one long Start with a live stdin (WriteStdin); without its packages in the image a
            # Python cell runs plain (no IPython: core's kernel says so), a bash cell where the image has bash.
            cells="python" in self.languages,
            cells_languages=frozenset({"python"} | ({"bash"} & self.languages))
            if "python" in self.languages
            else frozenset(),
            production=isolation == "microvm",
            price_per_second=Decimal(0),  # your own cluster: sandbox.price says what a second costs you
            outage_remedy=(
                f"check the warm pool (kubectl -n {self.config.namespace} get sandboxwarmpool "
                f"{self.config.warm_pool}), the agent-sandbox controller's logs, and that this process reaches the "
                f"pods ({self.config.reach})"
            ),
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> NetworkPolicy:
        """The hosts as a CiliumNetworkPolicy's egress (``network: cilium``); none: the template's deny-all."""
        return cilium_egress(hosts) if self.config.network == "cilium" else None

    def _fqdn_capable(self) -> bool:
        """Whether the cluster serves Cilium's policies (read once per driver)."""
        if self._cilium is None:
            self._cilium = self.cluster.serves(GROUP, VERSION)
        return self._cilium

    @hookimpl
    def mainsdk_driver_check(self, command: Command, spec: BoxSpec) -> None:
        """Refuse what the warm pool's pods cannot hold, before anything starts."""
        template = self._known()
        if template is not None:
            self._refuse(template, spec)

    def _refuse(self, template: Template, spec: BoxSpec) -> None:
        if spec.network_policy and not self._fqdn_capable():
            raise SandboxError(
                INVALID_OPTION,
                f"kubernetes: this cluster serves no {GROUP}/{VERSION} CiliumNetworkPolicy, so it cannot express an "
                f"allowlist of host names ({', '.join(spec.hosts)}): a NetworkPolicy names addresses only; run "
                "Cilium, or run without hosts (sandbox.kubernetes.network: none)",
            )
        if template.memory_limit is not None and spec.limits.memory < template.memory_limit:
            raise SandboxError(
                INVALID_OPTION,
                f"kubernetes: limits.memory {spec.limits.memory // (1024 * 1024)}MB is below the "
                f"{template.memory_limit // (1024 * 1024)}Mi limit of template {template.name}'s pods, which is what "
                "holds a run's memory; ask for at least that, or claim from a pool whose template has a smaller limit",
            )
        if not template.egress_denied:
            raise SandboxError(
                INVALID_OPTION,
                f"kubernetes: template {template.name} has no networkPolicy denying egress, so its pods may reach "
                "the network; give it spec.networkPolicy with no egress rules (networkPolicy: {})",
            )

    def _http(self) -> httpx.AsyncClient:
        if self.http is None:
            self.http = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0))
        return self.http

    def _route(self, claimed: Claimed) -> Route:
        host = claimed.service_fqdn if self.config.reach == "service" and claimed.service_fqdn else claimed.pod_ip
        grpc_target = self.address(host, self.config.grpc_port)
        if self.config.router_url is None:
            return Route(grpc_target, f"http://{self.address(host, self.config.rest_port)}")
        headers = {
            "X-Sandbox-ID": claimed.sandbox,
            "X-Sandbox-Namespace": self.config.namespace,
            "X-Sandbox-Port": str(self.config.rest_port),
            "X-Sandbox-Pod-IP": claimed.pod_ip,
        }
        token = self.config.router_token.value
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return Route(grpc_target, self.config.router_url.rstrip("/"), headers)

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> KubernetesBox:
        """Claim a pod of the warm pool, then write the files to its work folder."""
        template = await asyncio.to_thread(self.template)  # an outage here is one before anything ran
        self._refuse(template, spec)
        name = claim_name(spec.id)
        try:
            claimed = await self.cluster.claim(name, self.config.warm_pool or "", self.config.ready_seconds)
        except BaseException:
            await asyncio.shield(self.cluster.delete(name))
            raise
        if claimed.runtime_class != template.runtime_class:
            # The pod is not what the template said (it changed since it was read): its isolation is not the one
            # this run reports, so it is not used.
            self._template = None
            await asyncio.shield(self.cluster.delete(name))
            raise SandboxError(
                DRIVER_UNAVAILABLE,
                f"kubernetes: pod {claimed.pod} runs with RuntimeClass {claimed.runtime_class}, not the template's "
                f"{template.runtime_class}; the template changed since it was read: retry",
            )
        box = KubernetesBox(spec.id, spec, claimed, Sandboxd(self._route(claimed), self._http()))
        try:
            if spec.network_policy:
                # Before anything runs in the pod. Cilium realizes a policy on the pod asynchronously; until it
                # has, the template's deny-all holds: a command that starts first reaches less, never more.
                await self.cluster.create_policy(
                    cilium_policy(
                        name, self.config.namespace, selector_labels(claimed.selector), dict(spec.network_policy)
                    )
                )
                box.policy = name
            for path, data in spec.files.items():
                await box.sandboxd.put(f"work/{path}", data)
        except BaseException:
            await asyncio.shield(self.mainsdk_driver_stop(box))
            raise
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: KubernetesBox, command: Command, output: OutputSink) -> ExecOutcome:
        """One ``Start`` stream; killed by group at its timeout and on cancel; an OOM kill is a ``memory`` stop."""
        keep = sorted(set(command.env) | set(BASELINE))
        argv = ["/bin/sh", "-c", WRAPPER, " ".join(keep), self.config.root, command.program, *command.args]
        began = time.monotonic()
        process = box.sandboxd.start(argv, dict(command.env))
        feeding: asyncio.Task[None] | None = None
        try:
            try:
                async with asyncio.timeout(command.timeout):
                    await process.started()
                    feeding = asyncio.create_task(self._feed(process, command))
                    code = await self._stream(process, output)
            except TimeoutError:
                await process.kill()
                return ExecOutcome(None, stop="timeout", duration=time.monotonic() - began)
            except (grpc.aio.AioRpcError, StreamBroken) as exc:
                if await self._oom(box):
                    return ExecOutcome(None, stop="memory", duration=time.monotonic() - began)
                why = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else "no exit"
                raise SandboxError(DRIVER_UNAVAILABLE, f"sandboxd: the command's stream ended ({why})") from exc
        except asyncio.CancelledError:
            await asyncio.shield(process.kill())
            raise
        finally:
            if feeding is not None:
                feeding.cancel()
                with contextlib.suppress(BaseException):
                    await feeding
        duration = time.monotonic() - began
        if code < 0 and await self._oom(box):
            return ExecOutcome(None, stop="memory", duration=duration)
        return ExecOutcome(code, duration=duration)

    async def _feed(self, process: Process, command: Command) -> None:
        try:
            if command.stdin:
                await process.write(command.stdin)
            if command.input is not None:  # a live stdin (the cell kernel's), after the stdin given whole
                async for chunk in command.input:
                    await process.write(chunk)
            await process.close_stdin()
        except grpc.aio.AioRpcError:
            pass  # the process ended before reading it all: its exit says what happened

    async def _stream(self, process: Process, output: OutputSink) -> int:
        while True:
            event = await process.next()
            if event is None:
                raise StreamBroken("the stream ended without an ExitEvent")
            kind = event.WhichOneof("event")
            if kind == "stdout":
                output.stdout(event.stdout)
            elif kind == "stderr":
                output.stderr(event.stderr)
            elif kind == "exit":
                return int(event.exit.exit_code)

    async def _oom(self, box: KubernetesBox) -> bool:
        """Whether the pod's kubelet status says a container was OOM-killed since the claim (one pod read)."""
        try:
            pod = await self.cluster.read_pod(box.claimed.pod)
        except SandboxError:
            return False
        return oom_killed(pod, box.claimed.restarts)

    @hookimpl
    async def mainsdk_driver_collect(self, box: KubernetesBox, max_bytes: int) -> Collected:
        """The out folder as one tar stream, its regular files only, at most ``max_bytes``."""
        process = box.sandboxd.start(["/bin/sh", "-c", ARCHIVE, self.config.root], {})
        archive = bytearray()
        cut = False
        try:
            # Its stdin is never closed: tar does not read it, and a WriteStdin racing the exit would be NOT_FOUND
            # (sandboxd removes a process from its registry as its Start returns, pkg/server/process.go).
            await process.started()
            while (event := await process.next()) is not None and event.WhichOneof("event") != "exit":
                if event.WhichOneof("event") == "stdout":
                    archive += event.stdout
                    if len(archive) > max_bytes + COLLECT_SLACK:
                        cut = True
                        await process.kill()
                        break
        except (grpc.aio.AioRpcError, StreamBroken) as exc:
            raise SandboxError(DRIVER_UNAVAILABLE, "sandboxd: the out folder's archive failed") from exc
        collected = await asyncio.to_thread(_unpack, bytes(archive), max_bytes)
        return attrs.evolve(collected, truncated=True) if cut else collected

    @hookimpl
    async def mainsdk_driver_write_file(self, box: KubernetesBox, folder: Folder, path: str, data: bytes) -> None:
        """Write a file of the work or out folder (sandboxd's atomic PUT: a link there is replaced, not followed)."""
        await box.sandboxd.put(f"{folder.value}/{path}", data)

    @hookimpl
    async def mainsdk_driver_read_file(self, box: KubernetesBox, folder: Folder, path: str) -> bytes:
        """Read a file of the work or out folder."""
        return await box.sandboxd.get(f"{folder.value}/{path}")

    @hookimpl
    async def mainsdk_driver_stop(self, box: KubernetesBox) -> None:
        """Close the pod's channel and delete the claim: the pod and everything it ran go with it."""
        with contextlib.suppress(Exception):
            await box.sandboxd.close()
        await self.cluster.delete(box.claimed.claim)
        if box.policy is not None:
            await self.cluster.delete_policy(box.policy)

    @hookimpl
    def mainsdk_driver_shutdown(self) -> None:
        """Close the API client's connections."""
        self.cluster.api.close()  # type: ignore[no-untyped-call]


def _unpack(archive: bytes, max_bytes: int) -> Collected:
    """The regular files of a tar archive, through the kit's bounded walk (links, devices and the rest skipped)."""
    with tempfile.TemporaryDirectory(prefix="mainsdk-k8s-out-") as folder:
        try:
            with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
                for member in tar:
                    if member.isreg() or member.isdir():
                        # The data filter refuses absolute names, '..', links and special files.
                        with contextlib.suppress(tarfile.TarError, OSError):
                            tar.extract(member, folder, filter="data")
        except tarfile.TarError:
            pass  # a cut archive: what came whole is kept, and collect says truncated
        return collect_folder(folder, max_bytes)


def _api_client(config: KubernetesConfig) -> k8s.ApiClient:
    """The official client, from the pod's service account or a kubeconfig."""
    try:
        if config.in_cluster:
            configuration = k8s.Configuration()
            kubeconfig.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return k8s.ApiClient(configuration)
        api: k8s.ApiClient = kubeconfig.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=os.path.expanduser(config.kubeconfig) if config.kubeconfig else None, context=config.context
        )
        return api
    except (kubeconfig.ConfigException, OSError) as exc:
        where = "the pod's service account" if config.in_cluster else (config.kubeconfig or "the default kubeconfig")
        raise SandboxError(
            INVALID_OPTION,
            f"kubernetes: could not load {where}: set sandbox.kubernetes.kubeconfig (and context), or in_cluster: true",
        ) from exc


def kubernetes_driver(
    config: KubernetesConfig,
    *,
    api_url: str | None = None,
    address: Address | None = None,
    token: str | None = None,
) -> SessionDriver[KubernetesBox]:
    """The driver on ``config``; ``api_url`` (an API server with no auth, such as a replay server) replaces the
    kubeconfig (with ``token`` as its bearer token, if any), and ``address`` maps a pod's host and port to what to
    dial (tests: a stand-in on loopback)."""
    if api_url is not None:
        configuration = k8s.Configuration(host=api_url)
        if token:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        api = k8s.ApiClient(configuration)
    else:
        api = _api_client(config)
    remedy = f"check the cluster's agent-sandbox controller and the warm pool in namespace {config.namespace}"
    cluster = Cluster(api, config.namespace, remedy)
    return KubernetesDriver(
        config, cluster, address or (lambda host, port: f"{host}:{port}"), frozenset(config.languages)
    )


def driver_from_config(
    config: AppConfig, *, api_url: str | None = None, address: Address | None = None, token: str | None = None
) -> SessionDriver[KubernetesBox]:
    """The ``mainsdk.drivers`` entry point: the driver on ``sandbox.kubernetes``."""
    section = config.sandbox.section("kubernetes", KubernetesConfig)
    return kubernetes_driver(section, api_url=api_url, address=address, token=token)
