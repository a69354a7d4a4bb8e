"""A box of the Vercel driver, and where its files live in the sandbox."""

from __future__ import annotations

import asyncio

import attrs
from mainsdk.driver import BoxSpec

# The driver's folder in the sandbox: the legacy runtimes' working folder (docs "System Specifications"), which
# no managed image has (github vercel/sandbox ``images/ubuntu/Dockerfile``, ``images/universal/Dockerfile``:
# ``HOME=/vercel``, ``WORKDIR /vercel``, owned by the image's user, nothing in it). The driver never assumes it
# exists: commands are sent with no ``cwd`` (they start in the image's WORKDIR, as the official clients' do), the
# command wrapper makes its folders, and an upload's tar of absolute names (``x-cwd: /``) makes those it needs.
ROOT = "/vercel/sandbox"
WORK = f"{ROOT}/work"
OUT = f"{ROOT}/out"
PRIVATE = f"{ROOT}/.mainsdk"  # the driver's own files (stdin of long code, out archives), outside work and out
SESSIONS = "/v2/sandboxes/sessions"


@attrs.define(eq=False)
class VercelBox:
    """A box: its spec, and the sandbox behind it once created (``session_id``, ``name``)."""

    id: str
    spec: BoxSpec
    session: bool
    session_id: str | None = None
    name: str | None = None
    expires: float = 0.0  # monotonic time Vercel's own timeout stops the sandbox
    started: float = 0.0  # monotonic time of its create: the plan's maximum duration counts from here
    gone: bool = False  # known stopped (by us, or Vercel said so): nothing more to ask of it
    commands: int = 0  # commands sent so far: names per command, unique in the VM and the same on every run
    archive: str | None = None  # the out archive the last command finished writing (one-shot runs)
    lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    # Requests to the sandbox are sent in the order the hooks were called: a command holds it until Vercel
    # says it started (its first NDJSON line), a file write or read until it is done. A session's cell
    # interpreter and its first cell file, or two background processes, then reach Vercel (and a replayed
    # cassette) in one order. Kills and the stop never wait for it.
    sending: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    kernel_site: str | None = None  # the folder of the cell kernel's packages, once installed (``KERNEL``)
    paused: str | None = None  # Vercel's snapshot of a paused session's files (_checkpoints.py), until its resume
