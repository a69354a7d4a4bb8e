"""The control plane: agent-sandbox's claims, sandboxes, warm pools and templates, pods and runtime classes,
through the official ``kubernetes`` client (synchronous: each call runs in a worker thread).

The resources and fields are agent-sandbox's v1beta1 CRDs (github kubernetes-sigs/agent-sandbox @
2fd412d55ecae90861a101a5424a75473de97c36, ``k8s/crds/*.yaml``): a ``SandboxClaim`` (``extensions.agents.x-k8s.io``)
names a ``SandboxWarmPool`` (``spec.warmPoolRef``, required), and its ``status`` gives the adopted ``Sandbox``'s
name and pod IPs once its ``Ready`` condition is True; the ``Sandbox`` (``agents.x-k8s.io``) gives the service FQDN
and its pod's name (annotation ``agents.x-k8s.io/pod-name``, the python client's ``constants.POD_NAME_ANNOTATION``,
else the sandbox's own name).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import attrs
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from mainsdk.driver import DRIVER_UNAVAILABLE, INVALID_OPTION, SandboxError
from urllib3.exceptions import HTTPError as Urllib3Error

from mainsdk_kubernetes.network import GROUP, PLURAL, VERSION

CLAIMS = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxclaims")
POOLS = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxwarmpools")
TEMPLATES = ("extensions.agents.x-k8s.io", "v1beta1", "sandboxtemplates")
SANDBOXES = ("agents.x-k8s.io", "v1beta1", "sandboxes")
POD_NAME_ANNOTATION = "agents.x-k8s.io/pod-name"
# Labels on the claim, so an operator (or a reaper) finds what this driver made.
MANAGED_BY = {"app.kubernetes.io/managed-by": "mainsdk"}

RETRIES_429 = 3
MAX_RETRY_AFTER = 10.0

T = TypeVar("T")


@attrs.frozen
class Claimed:
    """A ready claim: the sandbox adopted for it, where its pod is, and the pod's state when claimed."""

    claim: str
    sandbox: str
    pod: str
    pod_ip: str
    service_fqdn: str | None
    restarts: int  # the pod's containers' restarts when claimed: an OOM kill after it adds one
    runtime_class: str | None  # the pod's spec.runtimeClassName: what it really runs with
    selector: str  # the Sandbox's status.selector: its pod's labels


@attrs.frozen
class Template:
    """What a warm pool's pods are: their RuntimeClass (None: plain runc), their memory limit, their egress."""

    name: str
    runtime_class: str | None
    handler: str | None
    memory_limit: int | None  # bytes, the smallest container limit; None when a container has none
    egress_denied: bool  # the template's networkPolicy lets nothing out (no egress rule)


def _retry_after(exc: ApiException) -> float | None:
    """The seconds a 429 says to wait (at most ``MAX_RETRY_AFTER``), or None when it names none."""
    value = (exc.headers or {}).get("Retry-After")
    try:
        return min(float(value), MAX_RETRY_AFTER) if value is not None else None
    except ValueError:
        return None


def quantity(text: str | int) -> int:
    """A Kubernetes memory quantity (``64Mi``, ``1G``, ``134217728``) in bytes."""
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "k": 1000, "M": 1000**2, "G": 1000**3}
    value = str(text)
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return int(float(value[: -len(suffix)]) * factor)
    return int(float(value))


def restarts(pod: dict[str, Any]) -> int:
    """All restarts of a pod's containers."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def oom_killed(pod: dict[str, Any], before: int) -> bool:
    """Whether a container of the pod was OOM-killed since it had ``before`` restarts (the kubelet's status)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for key in ("state", "lastState"):
            terminated = (status.get(key) or {}).get("terminated") or {}
            if terminated.get("reason") == "OOMKilled" and (key == "state" or restarts(pod) > before):
                return True
    return False


class Cluster:
    """The Kubernetes API of one namespace, through one ``ApiClient``."""

    def __init__(self, api: k8s.ApiClient, namespace: str, remedy: str) -> None:
        self.api = api
        self.namespace = namespace
        self.custom = k8s.CustomObjectsApi(api)
        self.core = k8s.CoreV1Api(api)
        self.node = k8s.NodeV1Api(api)
        self.apis = k8s.ApisApi(api)
        self.remedy = remedy

    async def call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` in a worker thread; the API's failures as ``SandboxError``s naming ``what``."""
        return await asyncio.to_thread(self._guarded, what, fn)

    def _guarded(self, what: str, fn: Callable[[], T]) -> T:
        for attempt in range(RETRIES_429 + 1):
            try:
                return fn()
            except ApiException as exc:
                # 429 is the API server's priority and fairness saying it did not take the request: safe to send
                # again, after the Retry-After it names (k8s.io/apiserver pkg/server/filters/maxinflight.go and
                # priority-and-fairness.go set it; client-go's rest client waits for it the same way).
                wait = _retry_after(exc) if exc.status == 429 and attempt < RETRIES_429 else None
                if wait is None:
                    raise self.error(what, exc) from exc
                time.sleep(wait)
            except (Urllib3Error, OSError) as exc:
                raise SandboxError(DRIVER_UNAVAILABLE, f"kubernetes: {what}: the API server is unreachable") from exc
        raise AssertionError("unreachable")

    def error(self, what: str, exc: ApiException) -> SandboxError:
        """An API answer as the code that fits: 404 gone (0008), 403/422 a setup to fix (0001), else an outage."""
        status = int(exc.status or 0)
        if status == 404:
            # A claim, sandbox or pod gone while it was being made or used: the controller (or someone) deleted it.
            return SandboxError(DRIVER_UNAVAILABLE, f"kubernetes: {what}: it is gone (404)")
        if status in (401, 403):
            return SandboxError(
                INVALID_OPTION,
                f"kubernetes: {what}: the API server refused the credentials ({status}); give the kubeconfig's user "
                f"(or the service account) get/create/delete on sandboxclaims in namespace {self.namespace}",
            )
        if status in (400, 409, 422):
            return SandboxError(INVALID_OPTION, f"kubernetes: {what}: the API server refused it ({status})")
        return SandboxError(DRIVER_UNAVAILABLE, f"kubernetes: {what}: the API server answered {status}")

    def _get(self, kind: tuple[str, str, str], name: str) -> dict[str, Any]:
        group, version, plural = kind
        return cast(
            dict[str, Any], self.custom.get_namespaced_custom_object(group, version, self.namespace, plural, name)
        )

    def template_now(self, pool: str, runtime_isolation: dict[str, str]) -> Template:
        """The warm pool's template: its runtime class (and the class's handler), memory limit and egress policy.

        Synchronous: the capabilities hook, which needs it, is.
        """
        warm = self._guarded(f"read SandboxWarmPool {pool}", lambda: self._get(POOLS, pool))
        name = str(((warm.get("spec") or {}).get("sandboxTemplateRef") or {}).get("name") or "")
        spec = self._guarded(f"read SandboxTemplate {name}", lambda: self._get(TEMPLATES, name)).get("spec") or {}
        pod = (spec.get("podTemplate") or {}).get("spec") or {}
        runtime = pod.get("runtimeClassName")
        handler: str | None = None
        if runtime:
            rc = self._guarded(f"read RuntimeClass {runtime}", lambda: self.node.read_runtime_class(runtime))
            handler = str(rc.handler)
        limits = [((c.get("resources") or {}).get("limits") or {}).get("memory") for c in pod.get("containers") or []]
        memory = None if not limits or None in limits else min(quantity(x) for x in limits if x is not None)
        # agent-sandbox's extensions/api/v1beta1/sandboxtemplate_types.go: a managed networkPolicy with no egress
        # rule is Default Deny; an omitted one is the controller's "Secure Default", which lets the public internet
        # out; "Unmanaged" ignores the field altogether.
        policy = spec.get("networkPolicy")
        managed = spec.get("networkPolicyManagement", "Managed") == "Managed"
        denied = managed and isinstance(policy, dict) and not policy.get("egress")
        return Template(name, runtime, handler, memory, denied)

    async def claim(self, name: str, pool: str, timeout: float) -> Claimed:
        """Create a claim on ``pool`` and wait, on one watch, until it is ready; its sandbox and pod.

        The claim carries no ``env`` and no volume claims: either would make agent-sandbox cold-start a pod
        instead of adopting a warm one. A run's environment and secrets go with each command (sandboxd's
        ``ProcessConfig.env_vars``), never into the claim.
        """
        group, version, plural = CLAIMS
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": "SandboxClaim",
            "metadata": {"name": name, "labels": MANAGED_BY},
            "spec": {"warmPoolRef": {"name": pool}, "lifecycle": {"shutdownPolicy": "Delete"}},
        }
        created = await self.call(
            f"create SandboxClaim on pool {pool}",
            lambda: cast(
                dict[str, Any],
                self.custom.create_namespaced_custom_object(group, version, self.namespace, plural, body),
            ),
        )
        version_seen = str(((created or {}).get("metadata") or {}).get("resourceVersion") or "0")
        ready = await self.call(f"wait for SandboxClaim {name}", lambda: self._watch_ready(name, version_seen, timeout))
        sandbox_name = str(((ready.get("status") or {}).get("sandbox") or {}).get("name") or "")
        sandbox = await self.call(f"read Sandbox {sandbox_name}", lambda: self._get(SANDBOXES, sandbox_name))
        status = sandbox.get("status") or {}
        annotations = (sandbox.get("metadata") or {}).get("annotations") or {}
        pod_name = str(annotations.get(POD_NAME_ANNOTATION) or sandbox_name)
        pod = await self.read_pod(pod_name)
        ips = status.get("podIPs") or ((ready.get("status") or {}).get("sandbox") or {}).get("podIPs") or []
        if not ips:
            raise SandboxError(DRIVER_UNAVAILABLE, f"kubernetes: Sandbox {sandbox_name} is ready with no pod IP")
        runtime = (pod.get("spec") or {}).get("runtimeClassName")
        selector = str(status.get("selector") or "")
        return Claimed(
            name, sandbox_name, pod_name, str(ips[0]), status.get("serviceFQDN"), restarts(pod), runtime, selector
        )

    def _watch_ready(self, name: str, resource_version: str, timeout: float) -> dict[str, Any]:
        group, version, plural = CLAIMS
        stream = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in stream.stream(  # type: ignore[no-untyped-call]
                self.custom.list_namespaced_custom_object,
                group,
                version,
                self.namespace,
                plural,
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                timeout_seconds=max(1, int(timeout)),
            ):
                obj = cast(dict[str, Any], event.get("object") or {})
                if event.get("type") == "DELETED":
                    break
                for condition in (obj.get("status") or {}).get("conditions") or []:
                    if condition.get("type") == "Ready" and condition.get("status") == "True":
                        return obj
        finally:
            stream.stop()  # type: ignore[no-untyped-call]
        raise SandboxError(
            DRIVER_UNAVAILABLE,
            f"kubernetes: SandboxClaim {name} was not ready within {timeout:.0f}s; check the warm pool's replicas "
            "and the controller's events (kubectl describe sandboxclaim)",
        )

    def serves(self, group: str, version: str) -> bool:
        """Whether the API server serves ``group/version`` (discovery, ``GET /apis``: every user may read it)."""
        groups = self._guarded("read the API groups", self.apis.get_api_versions)
        return any(g.name == group and any(v.version == version for v in g.versions) for g in groups.groups)

    async def create_policy(self, body: dict[str, Any]) -> None:
        """Create a namespaced ``CiliumNetworkPolicy``."""
        await self.call(
            f"create CiliumNetworkPolicy {body['metadata']['name']}",
            lambda: self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body),
        )

    async def delete_policy(self, name: str) -> None:
        """Delete a ``CiliumNetworkPolicy``; gone already is fine."""
        with contextlib.suppress(SandboxError):
            await self.call(
                f"delete CiliumNetworkPolicy {name}",
                lambda: self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name),
            )

    async def read_pod(self, name: str) -> dict[str, Any]:
        """A pod, as plain JSON (the API's field names)."""

        def read() -> dict[str, Any]:
            pod = self.core.read_namespaced_pod(name, self.namespace)
            return cast(dict[str, Any], self.api.sanitize_for_serialization(pod))  # type: ignore[no-untyped-call]

        return await self.call(f"read Pod {name}", read)

    async def delete(self, name: str) -> None:
        """Delete a claim (its sandbox and pod with it: ``shutdownPolicy: Delete``); gone already is fine."""
        group, version, plural = CLAIMS
        with contextlib.suppress(SandboxError):
            await self.call(
                f"delete SandboxClaim {name}",
                lambda: self.custom.delete_namespaced_custom_object(group, version, self.namespace, plural, name),
            )
