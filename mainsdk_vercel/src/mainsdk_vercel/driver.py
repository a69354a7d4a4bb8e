"""The ``vercel-sandbox`` driver: each box is a Vercel Sandbox microVM, driven through Vercel's REST API with httpx.

The API generation is the one Vercel's current official clients speak: a
sandbox is created with ``POST /v3/sandboxes`` and everything after it goes
to its session, ``/v2/sandboxes/sessions/{sessionId}/...`` (PyPI
``vercel-sandbox`` 0.10.0, ``vercel/sandbox/_internal/api_client.py``; github
vercel/sandbox, ``packages/vercel-sandbox/src/api-client/api-client.ts``,
commit 087d659 "Use the V2 endpoints instead of V1"). See README.md for how a
run maps to requests.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import httpx
from mainsdk.config import AppConfig
from mainsdk.driver import (
    INVALID_OPTION,
    KERNEL_PACKAGES,
    LANGUAGES,
    NO_SESSION,
    BoxSpec,
    Capabilities,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    NetworkReach,
    OutputSink,
    SandboxError,
    before_command,
    environment_secrets,
)
from mainsdk.hookspecs import hookimpl
from mainsdk_driverkit.wheelhouse import Wheelhouse

from mainsdk_vercel._api import DEFAULT_BASE_URL, NotFound, VercelApi, VercelError, session_ended
from mainsdk_vercel._archive import ARCHIVE_SLACK, MAX_OUT_ENTRIES, _targz, unpack_out
from mainsdk_vercel._box import OUT, PRIVATE, ROOT, SESSIONS, WORK, VercelBox
from mainsdk_vercel._checkpoints import Checkpoints, snapshot_body
from mainsdk_vercel._egress import vercel_injection_policy, vercel_network_policy, without_values
from mainsdk_vercel._images import create_request, image_problem, not_found
from mainsdk_vercel._installs import Installs
from mainsdk_vercel._lifetimes import MARGIN, Lifetimes, human
from mainsdk_vercel._session_api import ARCHIVE_ONLY, PROGRAMS, WRAPPER, Run, SessionApi, bash_added
from mainsdk_vercel.config import PLAN_MAX_DURATION, VercelConfig
from mainsdk_vercel.packages import KERNEL

__all__ = [
    "ARCHIVE_SLACK",
    "MARGIN",
    "MAX_OUT_ENTRIES",
    "ROOT",
    "WRAPPER",
    "VercelBox",
    "VercelDriver",
    "_targz",
    "_unpack_out",
    "default_price",
    "driver_from_config",
    "resolve_token",
    "session_name",
    "vercel_injection_policy",
    "vercel_network_policy",
    "vercel_sandbox_driver",
]

log = logging.getLogger("mainsdk.vercel")
DRIVER_ID = "vercel-sandbox"
VCPUS = 2  # Vercel's default size; memory is 2 GB per vCPU
# Vercel's published prices (providers.md): active CPU $0.128 per vCPU-hour, memory $0.0212 per GB-hour.
CPU_PER_HOUR = Decimal("0.128")
MEMORY_GB_PER_HOUR = Decimal("0.0212")
TAG_SESSION = "mainsdk-session"  # the tags a session's sandbox carries (see mainsdk_driver_reconnect)
TAG_TENANT = "mainsdk-tenant"
_unpack_out = unpack_out  # the name the tests import it by


def session_name(session_id: str) -> str:
    """The Vercel sandbox name of a mainsdk session: lowercase letters, digits and dashes."""
    return "mainsdk-" + session_id.lower().replace("_", "-")


def default_price(vcpus: int = VCPUS) -> Decimal:
    """Dollars per second of a box of ``vcpus`` with every CPU busy: the worst case, for max-cost checks."""
    per_hour = vcpus * CPU_PER_HOUR + 2 * vcpus * MEMORY_GB_PER_HOUR
    return (per_hour / 3600).quantize(Decimal("1e-10"))


class VercelDriver:
    """The ``vercel-sandbox`` driver plugin. Build it with ``vercel_sandbox_driver`` or from ``main.yaml``."""

    def __init__(
        self,
        *,
        token: str,
        project: str | None,
        team: str | None = None,
        runtime: str | None = None,
        image: str | None = None,
        price: Decimal | None = None,
        base_url: str = DEFAULT_BASE_URL,
        client: httpx.AsyncClient | None = None,
        vcpus: int = VCPUS,
        wheelhouse: Wheelhouse | None = None,
        plan: str = "hobby",
        max_duration: float | None = None,
    ) -> None:
        problem = image_problem(image, runtime)
        if problem is not None:
            raise SandboxError(INVALID_OPTION, problem)
        self._api = VercelApi(token=token, team=team, base_url=base_url, client=client)
        # The longest a sandbox may live from its start (Vercel stops it there; extend-timeout cannot pass it).
        cap = max_duration if max_duration is not None else PLAN_MAX_DURATION[plan]
        setting = (
            f"sandbox.vercel.max_duration: {human(cap)}" if max_duration is not None else f"sandbox.vercel.plan: {plan}"
        )
        self._lifetimes = Lifetimes(self._api, project, cap, setting)
        self._project = project
        # sandbox.vercel.image (runtime is its older name); None: Vercel's default image (_images.create_request).
        self._image = image if image is not None else runtime
        self._image_setting = "sandbox.vercel.image" if image is not None else "sandbox.vercel.runtime"
        self._vcpus = vcpus
        self._price = price if price is not None else default_price(vcpus)
        self._session = SessionApi(self._api, self._stop_quietly)
        self._installs = Installs(self._session, self._lifetimes, wheelhouse or Wheelhouse())
        self._checkpoints = Checkpoints(self._api, self._lifetimes, project, self._create)

    def __repr__(self) -> str:
        return f"VercelDriver(project={self._project!r})"  # never the token

    # --- hooks ------------------------------------------------------------------------------------------------------

    @hookimpl
    def mainsdk_driver_capabilities(self) -> Capabilities:
        return Capabilities(
            isolation="microvm",
            languages=frozenset(LANGUAGES),
            network=True,
            wildcard_hosts=True,
            memory_limit=False,  # a command gets the whole VM: no per-command memory cap to enforce
            # Each box is a VM of its own: its /tmp and the image's HOME (the default image's /vercel, its user's
            # home; the legacy runtimes' /home/vercel-sandbox: github vercel/sandbox images/ubuntu/Dockerfile,
            # runtime-base/Dockerfile) are its disk's and go with it. That disk is Vercel's size, not
            # permissions.disk.temp.max.
            private_tmp=True,
            disk_limit=False,
            sessions=True,
            # Cells and background processes are commands left running in a session's sandbox: Vercel runs any
            # number of commands at once in one session, each streaming its own logs (``cmd?wait=true&logs=true``
            # stays open until the command exits; vercel-sandbox 0.10.0 ``run_process``, @vercel/sandbox
            # ``api-client.ts`` ``runCommand``), and other requests (the cell files' ``fs/write``) go alongside.
            cells=True,
            # The kernel's Python, node and bash executors. The default image, vercel/sandbox/universal (github
            # vercel/sandbox images/universal/Dockerfile and images/README.md: Ubuntu, Node.js 24 from nodejs.org
            # into /usr/local, Python 3.14, bash). Node 24 strips TypeScript types, but the replays are authored
            # through a stand-in whose node (20 on the authoring host) does not: no "typescript" cells declared.
            cells_languages=frozenset({"python", "javascript", "bash"}),
            background=True,
            # Wheels downloaded on the app's side and installed offline in the box (packages.py): the run's
            # network is never widened for them.
            packages=True,
            production=True,
            price_per_second=self._price,
            # Vercel's egress firewall matches a domain by the TLS SNI; other traffic falls back to IP rules
            # (providers.md, "Checked against the providers' own sources"). Only HTTPS on 443 is declared:
            # whether SNI is matched on other ports, and plain HTTP by Host, is unverified (README).
            network_reach=NetworkReach(filtered=(("https", 443),)),
            # The create's networkPolicy carries the headers per host (vercel_injection_policy): Vercel's firewall
            # sets them on the box's HTTPS requests to that host, outside the VM.
            egress_headers=True,
            # Snapshots and forks from them, pause and resume, on Vercel's own snapshot calls (_checkpoints.py):
            # a Vercel snapshot keeps the filesystem only, and stops its source (which the driver opens again).
            checkpoint_kinds=frozenset({"filesystem"}),
            pause=True,
            outage_remedy="check Vercel's status and the token (sandbox.vercel.token, default secret:VERCEL_TOKEN)",
        )

    @hookimpl
    def mainsdk_network_policy(self, hosts: Sequence[str]) -> Any:
        return vercel_network_policy(hosts)

    @hookimpl
    async def mainsdk_driver_start(self, spec: BoxSpec) -> VercelBox:
        if not self._project:
            raise SandboxError(
                INVALID_OPTION, "sandbox.vercel.project is not set; set it to the Vercel project id (prj_...)"
            )
        if spec.limits.timeout >= self._lifetimes.cap:
            raise SandboxError(
                INVALID_OPTION,
                f"limits.timeout {spec.limits.timeout:g}s does not fit in a Vercel sandbox, which lives at most "
                f"{human(self._lifetimes.cap)} from its start on this plan ({self._lifetimes.cap_setting}); lower "
                "the timeout, or set "
                "sandbox.vercel.plan (or max_duration) to your plan's",
                ran=False,
            )
        box = VercelBox(spec.id, spec, session=spec.idle is not None)
        # A box from a snapshot starts from Vercel's snapshot of it (_checkpoints.py); 0008 if this driver has none.
        await self._create(box, self._checkpoints.source(spec.snapshot) if spec.snapshot else None)
        return box

    @hookimpl
    async def mainsdk_driver_reconnect(self, spec: BoxSpec) -> VercelBox | None:
        """The running sandbox of session ``spec.id`` another process created, if ``spec.tenant``'s; else None.

        Sessions are created named after their id, with the session and the
        tenant in their tags; ``GET /v2/sandboxes/{name}`` (as vercel-sandbox's
        ``get_sandbox``, never resuming) finds it, and the tags must match.
        """
        if not self._project or not spec.tenant:
            return None
        try:
            answer = await self._api.read_sandbox(session_name(spec.id), self._project)
        except NotFound:
            return None
        sandbox = answer.get("sandbox") if isinstance(answer, dict) else None
        session = answer.get("session") if isinstance(answer, dict) else None
        if not isinstance(sandbox, dict) or not isinstance(session, dict):
            return None
        tags = sandbox.get("tags")
        if not isinstance(tags, dict) or tags.get(TAG_SESSION) != spec.id or tags.get(TAG_TENANT) != spec.tenant:
            return None  # another tenant's (or not ours): the same 0008 as an unknown id
        if session.get("status") != "running" or not session.get("id"):
            return None
        box = VercelBox(spec.id, spec, session=True, session_id=str(session["id"]), name=str(sandbox.get("name")))
        self._lifetimes.taken_over(box, session)
        return box

    @hookimpl
    async def mainsdk_driver_exec(self, box: VercelBox, command: Command, output: OutputSink) -> ExecOutcome:
        await box.sending.acquire()
        held = [True]

        def sent() -> None:
            if held[0]:
                held[0] = False
                box.sending.release()

        try:
            return await self._exec(box, command, output, sent)
        finally:
            sent()

    async def _exec(
        self, box: VercelBox, command: Command, output: OutputSink, sent: Callable[[], None]
    ) -> ExecOutcome:
        await before_command(self._lifetimes.ensure(box))  # a failure here sent nothing: retryable
        program = PROGRAMS.get(command.program, command.program)
        box.commands += 1
        box.archive = None
        stdin = "/dev/null"
        if command.input is not None:
            stdin = "-"  # the live stdin: Command.stdin, if any, goes first through it (_feed)
        elif command.stdin is not None:
            # The bytes go in a file the wrapper feeds to the code (a command with attached stdin costs a
            # request per chunk).
            stdin = f"{PRIVATE}/stdin-{box.commands}"
            await before_command(self._session.write(box, {stdin.removeprefix(ROOT + "/"): command.stdin}))
        archive = "" if box.session else f"{PRIVATE}/out-{box.commands}.tgz"
        args = ["-c", WRAPPER, ROOT, stdin, archive, bash_added(command.env), program, *command.args]
        loop = asyncio.get_running_loop()
        started = loop.time()
        feeding: list[asyncio.Task[None]] = []
        running = asyncio.current_task()

        def ending() -> bool:
            # The app ends the input and cancels the command in one step (a kernel's kill): no close is sent then,
            # so what reaches Vercel (and a cassette) does not depend on which of the two goes first.
            return box.gone or running is None or running.done() or running.cancelling() > 0

        def began() -> None:
            sent()
            if command.input is not None and run.cmd_id is not None:
                feed = self._session.feed(box, run.cmd_id, command.stdin, command.input, ending)
                feeding.append(asyncio.create_task(feed))

        run = Run(started=began)
        try:
            async with asyncio.timeout(command.timeout):
                await self._session.run(
                    box, "bash", args, dict(command.env), run, output, stdin=command.input is not None
                )
        except TimeoutError:
            await self._session.kill(box, run.cmd_id)
            return ExecOutcome(exit_code=None, stop="timeout", duration=loop.time() - started)
        except asyncio.CancelledError:
            await asyncio.shield(self._session.kill(box, run.cmd_id))
            raise
        except VercelError as exc:
            if self._lifetimes.at_cap(box) and (session_ended(exc) or exc.vercel_status is None):
                raise self._lifetimes.capped(box) from None  # Vercel stopped the sandbox at the plan's cap, mid-command
            if session_ended(exc):
                box.gone = True  # Vercel said the session stopped (or is stopping): nothing runs there any more
            else:
                await self._session.kill(box, run.cmd_id)
            raise
        finally:
            for task in feeding:
                task.cancel()  # the command ended: what it did not take is dropped
            await asyncio.gather(*feeding, return_exceptions=True)
        assert run.exit_code is not None
        if run.exit_code >= 128 and self._lifetimes.at_cap(box):
            raise self._lifetimes.capped(box)  # killed as Vercel stopped the VM at the cap: not the code's own end
        box.archive = archive or None
        return ExecOutcome(exit_code=run.exit_code, duration=loop.time() - started)

    @hookimpl
    async def mainsdk_driver_kernel_site(self, box: VercelBox, language: str) -> str | None:
        """The folder of the cell kernel's packages in ``box`` (``KERNEL``), installed at the first call.

        The wheels of ``KERNEL_PACKAGES[language]`` are made from the app's own installed distributions (the
        driver depends on them; ``mainsdk_driverkit.installed``), picked for the image's python by the app's pip
        with ``--no-index`` into the wheelhouse (once, then reused by every box), go up in one ``fs/write`` with the
        installer and are installed offline into ``KERNEL``: one upload and one command per box, none at a later call (a
        restart). The sandbox's network is never widened for them. None for a language with no set.
        """
        pins = KERNEL_PACKAGES.get(language)
        if not pins:
            return None
        if box.kernel_site is None:
            # Before the kernel's exec: whatever fails here ran no code (0001 for the box's python, 0006 else).
            await before_command(self._installs.install_kernel(box, pins))
            box.kernel_site = KERNEL
        return box.kernel_site

    @hookimpl
    async def mainsdk_driver_write_file(self, box: VercelBox, folder: Folder, path: str, data: bytes) -> None:
        async with box.sending:
            await self._lifetimes.ensure(box)
            await self._session.write(box, {f"{folder.value}/{path}": data})  # the folders are ROOT/work and ROOT/out

    @hookimpl
    async def mainsdk_driver_read_file(self, box: VercelBox, folder: Folder, path: str) -> bytes:
        async with box.sending:
            await self._lifetimes.ensure(box)
            # ``path`` is checked by core (relative, no '.' or '..' segment).
            return await self._session.read(box, f"{WORK if folder is Folder.WORK else OUT}/{path}", path)

    @hookimpl
    async def mainsdk_driver_collect(self, box: VercelBox, max_bytes: int) -> Collected:
        if box.session_id is None or box.gone:
            return Collected()  # never created, or stopped to kill a command it could not address
        archive = box.archive
        if archive is None:
            # The command did not get to archive out/ (stopped at a limit, or cancelled): one command does it.
            box.commands += 1
            archive = f"{PRIVATE}/out-{box.commands}.tgz"
            await self._session.run(box, "bash", ["-c", ARCHIVE_ONLY, ROOT, archive], {}, Run(), None)
        try:
            data = await self._session.read_capped(box, archive, max_bytes + ARCHIVE_SLACK)
        except NotFound:
            # The wrapper always leaves an archive (empty when out/ is): none means out/ could not be read,
            # and the run's files would be silently lost.
            raise self._api.error("collect", None, cause="the out folder could not be archived") from None
        return unpack_out(data, max_bytes)

    @hookimpl
    async def mainsdk_driver_snapshot(self, box: VercelBox, snapshot_id: str, kind: str) -> float | None:
        """Keep the box's files (Vercel's ``snapshot``, which stops the sandbox), then open it again from them."""
        async with box.sending:
            return await self._checkpoints.snapshot(box, snapshot_id)

    @hookimpl
    async def mainsdk_driver_delete_snapshot(self, snapshot_id: str) -> None:
        """Delete Vercel's snapshot of ``snapshot_id``; boxes started from it keep their files."""
        await self._checkpoints.delete(snapshot_id)

    @hookimpl
    async def mainsdk_driver_pause(self, box: VercelBox) -> None:
        """Snapshot the sandbox and leave it stopped: it runs nothing, and its files wait in the snapshot."""
        async with box.sending:
            await self._checkpoints.pause(box)

    @hookimpl
    async def mainsdk_driver_resume(self, box: VercelBox) -> None:
        """Open a paused sandbox again from its snapshot (a new VM: its files, nothing that ran)."""
        async with box.sending:
            await self._checkpoints.resume(box)

    @hookimpl
    async def mainsdk_driver_stop(self, box: VercelBox) -> None:
        if box.paused is not None:
            paused, box.paused = box.paused, None
            await self._checkpoints.forget(paused)  # a paused session closed: its snapshot goes with it
        if box.session_id is None or box.gone:
            return
        box.gone = True
        try:
            await self._api.request("POST", f"{SESSIONS}/{box.session_id}/stop", "stop", json_body={}, idempotent=True)
        except VercelError as exc:
            # Already stopped (410), stopping (422), or no longer there (404): each is as good as stopped.
            if not (session_ended(exc) or exc.vercel_status == 404):
                raise

    @hookimpl
    def mainsdk_driver_shutdown(self) -> None:
        # Clients are per event loop and closed with it; nothing process-wide is held.
        return None

    # --- the box's sandbox ------------------------------------------------------------------------------------------

    async def _create(self, box: VercelBox, source: str | None = None) -> None:
        """Create the box's sandbox (not persistent: its stop leaves no snapshot behind), write its files and
        wheels (one request), and install its packages. From Vercel snapshot ``source`` when given: its files
        first; the source of a snapshot, made again from it (``box.name`` known already), gets nothing more.

        A set of packages is downloaded before the sandbox is created when the image's Python is known; the
        first box that needs packages asks the image (one command) after its create.
        """
        again = source is not None and box.name is not None  # the source of a snapshot, opened again
        pins = () if again else tuple(box.spec.packages)
        wheels = await self._installs.prefetch(pins)
        lease = self._lifetimes.lease(box, installs=bool(pins))
        policy = box.spec.network_policy if box.spec.network_policy is not None else vercel_network_policy(())
        if box.spec.egress:
            # The headers' values join the policy here only, never the audited one core holds.
            policy = vercel_injection_policy(policy, box.spec.egress)
        body: dict[str, Any] = {
            "projectId": self._project,
            "timeout": int(lease * 1000),
            "resources": {"vcpus": self._vcpus},
            "persistent": False,
            # Exactly the policy core handed over (and audited), with the egress headers; none at all: nothing out.
            "networkPolicy": policy,
        }
        path, image = create_request(self._image)
        if source is None:
            body.update(image)
        else:
            # The snapshot's filesystem, image and all; only v3 takes a source (api-client.ts ``createSandbox``).
            path, body["source"] = "/v3/sandboxes", snapshot_body(source)
        if box.session:
            # Named and tagged so another process (a web app's other worker) finds it by the session id, and only
            # for the same tenant (mainsdk_driver_reconnect).
            body["name"] = session_name(box.id)
            body["tags"] = {TAG_SESSION: box.id, TAG_TENANT: box.spec.tenant}
        try:
            answer = await self._api.json("POST", path, "create", json_body=body, idempotent=False)
        except VercelError as exc:
            if exc.vercel_status == 404 and source is not None:
                # Vercel has no such snapshot any more (expired, or deleted elsewhere): core's words for it.
                said = f"no snapshot {box.spec.snapshot!r:.80} in the current tenant (deleted or expired?)"
                vercel_said = without_values(exc, box.spec.egress).message
                raise SandboxError(NO_SESSION, f"{said}: {vercel_said}", status=404, ran=False) from None
            if exc.vercel_status == 404 and self._image is not None:
                # No sandbox was made: the image is not one Vercel has, which no retry changes.
                said = without_values(exc, box.spec.egress).message
                raise SandboxError(
                    INVALID_OPTION, not_found(self._image_setting, self._image, said), ran=False
                ) from None
            if not box.spec.egress:
                raise
            raise without_values(exc, box.spec.egress) from None
        try:
            box.session_id = str(answer["session"]["id"])
            box.name = str(answer["sandbox"]["name"])
        except (KeyError, TypeError):
            raise self._api.error("create", None, cause="the answer names no session id") from None
        self._lifetimes.started(box, lease)
        try:
            await self._lifetimes.until_running(box, answer["session"].get("status"))
            if pins and wheels is None:
                wheels = await self._installs.fetch(box, pins)  # the image's python, asked once per driver
            upload = {} if again else {f"work/{name}": data for name, data in box.spec.files.items()}
            folder = f".mainsdk/wheels-{wheels.key[:16]}" if wheels is not None else ""
            if wheels is not None:
                upload.update(await self._installs.upload(wheels, folder))
            if upload:
                # Wheels are zip files already: gzip's fastest level costs little and saves nothing less.
                await self._session.write(box, upload, level=1 if wheels is not None else 9)
            if wheels is not None:
                await self._installs.install(box, f"{ROOT}/{folder}", wheels.pins)
        except BaseException:
            await asyncio.shield(self._stop_quietly(box))
            raise

    async def _stop_quietly(self, box: VercelBox) -> None:
        try:
            await self.mainsdk_driver_stop(box)
        except SandboxError as exc:
            log.warning("could not stop Vercel sandbox %s: %s", box.name, exc.message)

    # --- commands ---------------------------------------------------------------------------------------------------


def resolve_token(value: str, environ: Mapping[str, str] | None = None) -> str:
    """``secret:NAME`` is the environment variable NAME; anything else is the token itself."""
    environ = os.environ if environ is None else environ
    if value.startswith("secret:"):
        name = value.removeprefix("secret:")
        token = environ.get(name, "")
        if not token:
            raise SandboxError(
                INVALID_OPTION,
                f"sandbox.vercel.token names the secret {name}, which is not set in the environment; set {name}",
            )
        return token
    return value


def vercel_sandbox_driver(
    *,
    token: str,
    project: str | None,
    team: str | None = None,
    runtime: str | None = None,
    image: str | None = None,
    price: Decimal | None = None,
    base_url: str = DEFAULT_BASE_URL,
    client: httpx.AsyncClient | None = None,
    plan: str = "hobby",
    max_duration: float | None = None,
) -> VercelDriver:
    """The ``vercel-sandbox`` driver with explicit settings (for tests: a loopback ``base_url`` or ``client``)."""
    return VercelDriver(
        token=token,
        project=project,
        team=team,
        runtime=runtime,
        image=image,
        price=price,
        base_url=base_url,
        client=client,
        plan=plan,
        max_duration=max_duration,
    )


def driver_from_config(config: AppConfig, **overrides: Any) -> VercelDriver:
    """The driver ``main.yaml`` describes (``sandbox.vercel``, ``sandbox.price``); the ``mainsdk.drivers`` entry point.

    ``MAINSDK_VERCEL_BASE_URL`` points the driver at another API host (the
    conformance recorder's proxy); ``overrides`` go to ``vercel_sandbox_driver``.
    """
    vercel = config.sandbox.section("vercel", VercelConfig)
    settings: dict[str, Any] = {
        "project": vercel.project,
        "team": vercel.team,
        "runtime": vercel.runtime,
        "image": vercel.image,
        "plan": vercel.plan,
        "max_duration": vercel.session_cap if vercel.max_duration is not None else None,
        "price": config.sandbox.price,
        "base_url": os.environ.get("MAINSDK_VERCEL_BASE_URL") or DEFAULT_BASE_URL,
    }
    settings.update(overrides)
    if "token" not in settings:
        token = vercel.token
        if not token.resolved:  # core resolves it when it loads the driver; this is a factory called by hand
            token = token.resolve(environment_secrets, "sandbox.vercel.token")
        if token.value is None:
            raise SandboxError(INVALID_OPTION, token.missing())
        settings["token"] = token.value
    return vercel_sandbox_driver(**settings)
