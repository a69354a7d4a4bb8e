"""What the replay server knows of a provider: its base URLs, how to tell its sandboxes apart, what a command is.

A profile is data, so a third party's provider needs no code here: build a
``Profile`` in your conftest and return it from the ``conformance_profile``
fixture.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any

import attrs


@attrs.frozen
class HeaderRule:
    """A request header the provider's server checks, and its answer when the check fails.

    Replay holds every request that carries ``header`` on ``method`` + ``path``
    (a pattern, searched) to it: exactly one value, fully matching ``pattern``.
    A request that breaks it gets ``status`` and the JSON ``body`` the server
    sends, and fails the test. ``source`` names the server's code the rule is from.
    """

    method: str
    path: str
    header: str
    pattern: str
    status: int
    body: Mapping[str, Any]
    source: str

    def applies(self, method: str, path: str) -> bool:
        """Whether a request to ``method`` ``path`` is held to the rule."""
        return method.upper() == self.method.upper() and re.search(self.path, path) is not None

    def broken_by(self, values: Sequence[str] | None) -> bool:
        """Whether the header's values (None: absent, which the rule allows) break it."""
        if values is None:
            return False
        return len(values) != 1 or re.fullmatch(self.pattern, values[0]) is None


@attrs.frozen
class Profile:
    """One provider, as the replay server sees it.

    ``upstreams``: name to the real base URL (record mode forwards there).
    ``lane_headers`` / ``lane_paths``: a request's sandbox id, from a header or
    the first group of a path pattern; requests of one sandbox must arrive in
    the recorded order. ``command_paths``: requests that start a command, which
    must never be sent twice. ``credential_env``: environment variables holding
    the recorder's credentials, whose values are scrubbed wherever they appear.
    ``api``: the API version a cassette notes. ``ignore_json``: JSON pointers
    left out of body matching (values that change every run, such as a request id).
    ``volatile``: patterns of values that change every run (core's random run and
    session ids) wherever they appear in a query value or a JSON string: they
    match any value of the same pattern, the rest of the value still counts.
    ``header_rules``: headers the server refuses unless they match (``HeaderRule``).
    ``epoch_ms_keys``: JSON keys whose number is a time in milliseconds since the epoch (Vercel's
    ``startedAt``); replay moves them, with every RFC 3339 time of an answer, so the recorded session starts now.
    ``secret_fields``: JSON pointers (``*`` for any key or index) of request fields that hold a credential the
    provider is given to use on the box's behalf (egress headers): recorder and replay scrub them
    (``cassette.scrub_fields``), a known secret's value to ``[scrubbed:NAME]``, anything else to ``[scrubbed]``.
    """

    name: str
    upstreams: Mapping[str, str]
    api: str = ""
    lane_headers: tuple[str, ...] = ()
    lane_paths: tuple[str, ...] = ()
    command_paths: tuple[str, ...] = ()
    credential_env: tuple[str, ...] = ()
    ignore_json: tuple[str, ...] = ()
    volatile: tuple[str, ...] = ()
    sdk: str = ""  # the SDK distribution whose version a recorded cassette notes
    header_rules: tuple[HeaderRule, ...] = ()
    epoch_ms_keys: tuple[str, ...] = ()
    secret_fields: tuple[str, ...] = ()

    def broken_rule(self, method: str, path: str, headers: Message) -> HeaderRule | None:
        """The first header rule a request breaks (its headers as ``http.server`` parsed them), or None."""
        for rule in self.header_rules:
            if rule.applies(method, path) and rule.broken_by(headers.get_all(rule.header)):
                return rule
        return None

    def lane(self, path: str, headers: Mapping[str, str]) -> str:
        """The sandbox a request belongs to, or ``""`` for one that names none (a create)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        for name in self.lane_headers:
            if lowered.get(name.lower()):
                return lowered[name.lower()]
        for pattern in self.lane_paths:
            match = re.search(pattern, path)
            if match:
                return match.group(1)
        return ""

    def is_command(self, method: str, path: str) -> bool:
        """Whether a request starts a command."""
        return method.upper() == "POST" and any(re.search(p, path) for p in self.command_paths)


# E2B's API on a create's Idempotency-Key, as its server checks it (not as the SDK's e2b/retry.py does, which lets
# hyphens through): e2b-dev/runtime (the Go module github.com/e2b-dev/infra)
# packages/api/internal/middleware/idempotency/middleware.go: `len(values) != 1 || len(values[0]) < 1 ||
# len(values[0]) > 255 || strings.ContainsFunc(values[0], r not in 'a'-'z' and not in '0'-'9')` -> reject(c, 400,
# ...), whose body is apierrors.SendAPIStoreError's {"code", "message"}. middleware_test.go TestBypassAndKeyValidation
# refuses "", a repeated key, 256 characters, "\xff", "ABC", "abc-123", " abc " on POST /v2/sandboxes even where
# the route's APIIdempotencyRoutes flag is off (the OpenAPI validator); an absent key is allowed.
E2B_IDEMPOTENCY_KEY = HeaderRule(
    method="POST",
    path=r"^/v2/sandboxes$",
    header="Idempotency-Key",
    pattern=r"[a-z0-9]{1,255}",
    status=400,
    body={
        "code": 400,
        "message": "Idempotency-Key must contain one value of 1 to 255 lowercase ASCII letters or digits",
    },
    source="e2b-dev/runtime packages/api/internal/middleware/idempotency/middleware.go",
)

# E2B through its SDK: the control plane (api_url) and envd (sandbox_url), told apart by E2b-Sandbox-Id.
E2B = Profile(
    name="e2b",
    upstreams={"api": "https://api.e2b.app", "sandbox": "https://sandbox.e2b.app"},
    api="e2b control plane v2, envd Connect JSON",
    sdk="e2b",
    lane_headers=("E2b-Sandbox-Id",),
    lane_paths=(r"^/(?:v2/)?sandboxes/([^/?]+)",),
    command_paths=(r"^/process\.Process/Start$",),
    credential_env=("E2B_API_KEY", "E2B_ACCESS_TOKEN"),
    # The driver tags each sandbox with core's run or session id (metadata, a list's filter, the idempotency key).
    # The in-VM backstop's seconds (``( sleep N & ...``, mainsdk_e2b.driver.shell_line) follow the command's time
    # limit, which a session's cost ceiling shortens by the time earlier commands took in this very run: a loaded
    # machine turns 7 into 6. Its value is checked by mainsdk_e2b's own tests, not by the replay.
    volatile=(r"\b(?:run|ses)[_-][0-9a-f]{16,24}\b", r"(?<=\( sleep )\d+(?= & s=\$!;)"),
    header_rules=(E2B_IDEMPOTENCY_KEY,),
    # A create's egress headers: network.rules, host to rules, each a transform setting headers to their values
    # (e2b-dev/infra spec/openapi.yml SandboxNetworkConfig.rules, SandboxNetworkRule, SandboxNetworkTransform).
    secret_fields=("/network/rules/*/*/transform/headers/*",),
)

# Vercel Sandbox as its current clients speak it: create with POST /v3/sandboxes, then everything keyed by the
# session id, /v2/sandboxes/sessions/{id}/... (vercel-sandbox 0.10.0; github vercel/sandbox api-client.ts).
VERCEL = Profile(
    name="vercel-sandbox",
    upstreams={"api": "https://api.vercel.com"},
    api="v3 create, v2 sessions",
    lane_paths=(r"^/v2/sandboxes/sessions/([^/?]+)",),
    command_paths=(r"^/v2/sandboxes/sessions/[^/]+/cmd$",),
    credential_env=("VERCEL_TOKEN", "VERCEL_OIDC_TOKEN"),
    # A session's sandbox is named and tagged after the session id, which is new on every run; it is read back
    # by that name (GET /v2/sandboxes/{name}) while it boots.
    ignore_json=("/name", "/tags/mainsdk-session"),
    volatile=(r"(?<=^/v2/sandboxes/)mainsdk-ses-[0-9a-f]{24}$",),
    # The session's times (vercel-sandbox's SandboxSession model): the driver measures the plan's cap from startedAt.
    epoch_ms_keys=("createdAt", "requestedAt", "startedAt", "updatedAt", "stoppedAt"),
    # A create's (or a policy update's) header injection: networkPolicy.allow, domain to rules, each a list of
    # transforms setting headers (vercel-sandbox 0.10.0 models._serialize_network_policy).
    secret_fields=("/networkPolicy/allow/*/*/transform/*/headers/*",),
)

# Kubernetes with agent-sandbox (mainsdk_kubernetes): the API server's requests, through the official client. A
# claim is named after core's run or session id (new on every run), in its body, its paths and its watch's
# fieldSelector; the adopted sandbox and pod are the warm pool's, named in the answers. Commands are not HTTP
# (sandboxd's gRPC ProcessService), so no path is a command here.
KUBERNETES = Profile(
    name="kubernetes",
    upstreams={"api": "https://kubernetes.default.svc"},
    api="kubernetes API, agent-sandbox v1beta1 (extensions.agents.x-k8s.io, agents.x-k8s.io)",
    sdk="kubernetes",
    # The lanes are the warm pool's sandboxes and pods (the claim's own name is volatile, so its requests name none).
    lane_paths=(r"/sandboxes/([^/?]+)$", r"/pods/([^/?]+)$"),
    credential_env=("KUBE_TOKEN",),
    volatile=(r"\b(?:run|ses)[_-][0-9a-f]{16,24}\b",),
)

PROFILES = {profile.name: profile for profile in (E2B, VERCEL, KUBERNETES)}
