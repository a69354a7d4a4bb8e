"""A stand-in Kubernetes API server with agent-sandbox's resources, on loopback, to author cassettes from.

No Kubernetes API server runs on these machines, so the conformance cassettes are recorded against this one (and
labelled ``made: authored``). It serves what the driver asks for, in the API's own shapes: a ``SandboxWarmPool``
and its ``SandboxTemplate``, the template's ``RuntimeClass`` (``node.k8s.io/v1``), ``SandboxClaim`` create, watch
and delete, the adopted ``Sandbox`` and its ``Pod``.

Every ``SandboxClaim`` it is sent, and every agent-sandbox object it answers, is held to the CRDs' v1beta1
OpenAPI schemas, vendored in ``agent-sandbox-v1beta1.json`` (its ``source`` and ``commit`` say from where), with
unknown fields refused (the API server would prune them and warn; where the stand-in errs, it errs on the strict
side). A claim is served as agent-sandbox's controller serves it: a claim with ``env`` or ``volumeClaimTemplates``
cannot take a warm pod and cold-starts one of its own (``cold_starts`` counts them), any other adopts the oldest
warm pod of the pool, which is replenished (docs: "A claim that sets env or volume claims cold-starts").
A watch answers the claim's state once it is ready, then ends (a real one stays open until ``timeoutSeconds``;
the client stops reading at the ready event either way).
"""

from __future__ import annotations

import http.server
import itertools
import json
import re
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonschema
from standin_pods import Pods

SCHEMAS = json.loads((Path(__file__).parent / "agent-sandbox-v1beta1.json").read_text())["schemas"]
EXT = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/"
AGENTS = "/apis/agents.x-k8s.io/v1beta1/namespaces/"
POD_NAME = "agents.x-k8s.io/pod-name"


def _strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists properties (``metadata`` stays open)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-")}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


VALIDATORS = {kind: jsonschema.Draft7Validator(_strict(s)) for kind, s in SCHEMAS.items()}


def problems(kind: str, obj: Any) -> list[str]:
    """What in ``obj`` its CRD's schema refuses."""
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in VALIDATORS[kind].iter_errors(obj)
    ]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _ready(reason: str = "Ready") -> list[dict[str, Any]]:
    return [{"type": "Ready", "status": "True", "reason": reason, "message": "", "lastTransitionTime": _now()}]


class ApiServer:
    """The stand-in: one namespace, one warm pool of ``replicas`` pods of one template."""

    def __init__(
        self,
        pods: Pods,
        *,
        namespace: str = "mainsdk",
        pool: str = "python-pool",
        template: str = "python-sandbox",
        runtime_class: str | None = "kata",
        handler: str = "kata-qemu",
        memory: str = "64Mi",
        replicas: int = 2,
        egress: list[Any] | None = None,
        ip_prefix: str = "10.244.0.",
        pod_runtime_class: str | None = "",
        cilium: bool = False,
        management: str = "Managed",
    ) -> None:
        self.pods, self.namespace, self.pool, self.template = pods, namespace, pool, template
        self.runtime_class, self.handler, self.memory, self.replicas = runtime_class, handler, memory, replicas
        self.egress = egress or []
        self.ip_prefix = ip_prefix
        # What the pods really run with, when a test makes it differ from the template ("": as the template says).
        self.pod_runtime_class = pod_runtime_class
        # Cilium installed: cilium.io/v2 served, its CiliumNetworkPolicies kept (never enforced: no pod here has a
        # network). policy_at: how many Starts the pods had been sent when each policy was made.
        self.cilium = cilium
        self.management = management  # the template's networkPolicyManagement
        self.policies: dict[str, dict[str, Any]] = {}
        self.policy_at: list[int] = []
        self.versions = itertools.count(1000)
        self.serial = itertools.count(1)
        self.claims: dict[str, dict[str, Any]] = {}
        self.sandboxes: dict[str, dict[str, Any]] = {}
        self.warm: list[str] = []
        self.cold_starts = 0
        self.claim_bodies: list[dict[str, Any]] = []
        self.requests: list[str] = []  # every request, "METHOD path", in order
        self.lock = threading.Lock()
        for _ in range(replicas):
            self._new_sandbox(f"{pool}-{next(self.serial):05d}")
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _new_sandbox(self, name: str, warm: bool = True) -> dict[str, Any]:
        ip = f"{self.ip_prefix}{next(self.serial) % 250 + 2}"
        self.pods.pod(ip, name)
        sandbox = {
            "apiVersion": "agents.x-k8s.io/v1beta1",
            "kind": "Sandbox",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "resourceVersion": str(next(self.versions)),
                "annotations": {POD_NAME: name},
            },
            "spec": {"podTemplate": self._pod_template()},
            "status": {
                "conditions": _ready("DependenciesReady"),
                "podIPs": [ip],
                "service": name,
                "serviceFQDN": f"{name}.{self.namespace}.svc.cluster.local",
                "selector": f"agents.x-k8s.io/sandbox-name-hash={name}",
            },
        }
        assert not problems("Sandbox", sandbox), problems("Sandbox", sandbox)
        self.sandboxes[name] = sandbox
        if warm:
            self.warm.append(name)
        return sandbox

    def _pod_template(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "sandbox",
                    "image": "standin/python-sandboxd",
                    "resources": {"limits": {"memory": self.memory}},
                }
            ]
        }
        if self.runtime_class is not None:
            spec["runtimeClassName"] = self.runtime_class
        return {"spec": spec}

    def warm_pool(self) -> dict[str, Any]:
        pool = {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": self.pool, "namespace": self.namespace},
            "spec": {"replicas": self.replicas, "sandboxTemplateRef": {"name": self.template}},
        }
        assert not problems("SandboxWarmPool", pool)
        return pool

    def template_object(self) -> dict[str, Any]:
        template = {
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": self.template, "namespace": self.namespace},
            "spec": {
                "podTemplate": self._pod_template(),
                "networkPolicy": {"egress": self.egress},
                "networkPolicyManagement": self.management,
            },
        }
        assert not problems("SandboxTemplate", template)
        return template

    def pod_object(self, name: str) -> dict[str, Any] | None:
        sandbox = self.sandboxes.get(name)
        if sandbox is None:
            return None
        ip = sandbox["status"]["podIPs"][0]
        pod = self.pods.pod(ip, name)
        spec = self._pod_template()["spec"]
        if self.pod_runtime_class != "":
            spec.pop("runtimeClassName", None)
            if self.pod_runtime_class is not None:
                spec["runtimeClassName"] = self.pod_runtime_class
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": spec,
            "status": pod.status(),
        }

    def create_claim(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        wrong = problems("SandboxClaim", body)
        if wrong or body.get("kind") != "SandboxClaim":
            return 422, status_body(422, "Invalid", f"SandboxClaim is invalid: {'; '.join(wrong) or 'kind'}")
        name = body["metadata"]["name"]
        with self.lock:
            if name in self.claims:
                return 409, status_body(409, "AlreadyExists", f'sandboxclaims "{name}" already exists')
            if body["spec"]["warmPoolRef"]["name"] != self.pool:
                return 422, status_body(422, "Invalid", "spec.warmPoolRef: no such SandboxWarmPool")
            self.claim_bodies.append(body)
            spec = body["spec"]
            if spec.get("env") or spec.get("volumeClaimTemplates") or not self.warm:
                self.cold_starts += 1
                sandbox = self._new_sandbox(name, warm=False)["metadata"]["name"]
            else:
                sandbox = self.warm.pop(0)
                self._new_sandbox(f"{self.pool}-{next(self.serial):05d}")  # the pool replenished
            claim = {
                **body,
                "metadata": {
                    **body["metadata"],
                    "namespace": self.namespace,
                    "uid": f"00000000-0000-4000-8000-{next(self.serial):012d}",
                    "resourceVersion": str(next(self.versions)),
                    "creationTimestamp": _now(),
                },
            }
            self.claims[name] = {"object": claim, "sandbox": sandbox}
            created = json.loads(json.dumps(claim))
        return 201, created

    def ready_claim(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            entry = self.claims.get(name)
            if entry is None:
                return None
            sandbox = self.sandboxes[entry["sandbox"]]
            claim: dict[str, Any] = json.loads(json.dumps(entry["object"]))
        claim["metadata"]["resourceVersion"] = str(next(self.versions))
        claim["status"] = {
            "conditions": _ready(),
            "sandbox": {"name": sandbox["metadata"]["name"], "podIPs": sandbox["status"]["podIPs"]},
        }
        assert not problems("SandboxClaim", claim), problems("SandboxClaim", claim)
        return claim

    def delete_claim(self, name: str) -> dict[str, Any] | None:
        with self.lock:
            entry = self.claims.pop(name, None)
            if entry is None:
                return None
            sandbox = self.sandboxes.pop(entry["sandbox"])
        self.pods.drop(sandbox["status"]["podIPs"][0])
        gone: dict[str, Any] = entry["object"]
        return gone


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """An API server's failure answer's body: a ``Status`` (k8s.io/apimachinery pkg/apis/meta/v1 types.go)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _handler(api: ApiServer) -> type[http.server.BaseHTTPRequestHandler]:
    ns = api.namespace
    claims = re.compile(rf"^{re.escape(EXT + ns)}/sandboxclaims(?:/([^/]+))?$")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _missing(self, what: str) -> None:
            self._json(404, status_body(404, "NotFound", f"{what} not found"))

        def do_GET(self) -> None:
            api.requests.append(f"GET {urlsplit(self.path).path}")
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            path = url.path
            if path in ("/apis", "/apis/"):
                groups = [
                    ("extensions.agents.x-k8s.io", "v1beta1"),
                    ("agents.x-k8s.io", "v1beta1"),
                    ("node.k8s.io", "v1"),
                ]
                if api.cilium:
                    groups.append(("cilium.io", "v2"))
                self._json(
                    200,
                    {
                        "kind": "APIGroupList",
                        "apiVersion": "v1",
                        "groups": [
                            {
                                "name": g,
                                "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                                "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v},
                            }
                            for g, v in groups
                        ],
                    },
                )
            elif path == f"{EXT}{ns}/sandboxwarmpools/{api.pool}":
                self._json(200, api.warm_pool())
            elif path == f"{EXT}{ns}/sandboxtemplates/{api.template}":
                self._json(200, api.template_object())
            elif api.runtime_class and path == f"/apis/node.k8s.io/v1/runtimeclasses/{api.runtime_class}":
                self._json(
                    200,
                    {
                        "apiVersion": "node.k8s.io/v1",
                        "kind": "RuntimeClass",
                        "metadata": {"name": api.runtime_class},
                        "handler": api.handler,
                    },
                )
            elif claims.match(path) and query.get("watch", [""])[0] in (
                "1",
                "t",
                "T",
                "true",
                "True",
                "TRUE",
            ):  # Go ParseBool
                selector = query.get("fieldSelector", [""])[0]
                claim = api.ready_claim(selector.removeprefix("metadata.name="))
                line = json.dumps({"type": "MODIFIED", "object": claim}).encode() + b"\n" if claim else b""
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if line:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.write(b"0\r\n\r\n")
            elif path.startswith(f"{AGENTS}{ns}/sandboxes/"):
                name = path.rsplit("/", 1)[1]
                sandbox = api.sandboxes.get(name)
                self._json(200, sandbox) if sandbox else self._missing(f'sandboxes "{name}"')
            elif path.startswith(f"/api/v1/namespaces/{ns}/pods/"):
                name = path.rsplit("/", 1)[1]
                pod = api.pod_object(name)
                self._json(200, pod) if pod else self._missing(f'pods "{name}"')
            else:
                self._missing(path)

        def do_POST(self) -> None:
            api.requests.append(f"POST {urlsplit(self.path).path}")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if claims.match(urlsplit(self.path).path):
                self._json(*api.create_claim(body))
            elif api.cilium and urlsplit(self.path).path == f"/apis/cilium.io/v2/namespaces/{ns}/ciliumnetworkpolicies":
                spec = body.get("spec") or {}
                if body.get("kind") != "CiliumNetworkPolicy" or not (spec.get("endpointSelector") or {}).get(
                    "matchLabels"
                ):
                    self._json(422, status_body(422, "Invalid", "CiliumNetworkPolicy needs spec.endpointSelector"))
                    return
                api.policies[body["metadata"]["name"]] = body
                api.policy_at.append(len(api.pods.starts))
                self._json(201, body)
            else:
                self._missing(self.path)

        def do_DELETE(self) -> None:
            api.requests.append(f"DELETE {urlsplit(self.path).path}")
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = urlsplit(self.path).path
            if api.cilium and path.startswith(f"/apis/cilium.io/v2/namespaces/{ns}/ciliumnetworkpolicies/"):
                policy = api.policies.pop(path.rsplit("/", 1)[1], None)
                self._json(200, policy) if policy else self._missing(path)
                return
            match = claims.match(path)
            gone = api.delete_claim(match.group(1)) if match and match.group(1) else None
            self._json(200, gone) if gone else self._missing(self.path)

    return Handler
