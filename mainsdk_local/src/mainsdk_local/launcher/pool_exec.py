"""The kind "exec" of the warm pool: a box made ahead whose C waits just before ``execve``.

C enters the pool folder's box exactly as the cold path's C does, with the cold path's own
functions (``pool.warm_main``: ``code_prepare``, ``code_enter_root``, ``code_enter_user``):
a fresh B with its pid namespace and cgroups, C in its own mount, net, ipc, uts and user
namespaces, root pivoted, uid dropped, keyring, no_new_privs, seccomp, capabilities gone. It
is a fork of the server, like the cold path's C before its exec, and runs no code of anyone's
before its ``execve``. Then it waits on its control socket.

At hand-off it gets the cold path's own job (``ChildContext.job``, with the run's stdout,
stderr and stdin descriptors), tells B the run's timeout (B's timer starts now: the time
limit counts from hand-off), closes the control socket, changes into ``/work`` again (the
run's box is now mounted over the pool folder's), and finishes as the cold path's C does
(``code_launch``): the run's rlimits, its descriptors on 0-2, every other descriptor
closed, ``execve`` of the run's argv with the run's env. The program starts only then, in
the run's ``/work``, so what it sees is the cold path's run: argv, ``$0``,
``/proc/self/cmdline``, environment, locale, tracebacks. What differs: ``/proc/self/mountinfo``
shows the pool folder under ``/work`` and ``/out``, and the box's host uid is the entry's
(``id`` inside shows the same 1000).

It takes any exec the client marked as poolable (``ExecRequest.warm`` not None): bash, node,
and the Python shapes the stub refuses (code on stdin, other flags, other start-up
variables). Its key is the root alone: nothing else of the run reaches C before hand-off.
Session boxes never take one (see ``WarmPool.hand_over``): their files were written
by earlier commands, and giving them to the entry's uid would chown paths code can change
under the server's feet; their hot spare already waits in the box with its uid.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any, NoReturn

from . import protocol, stages
from .pool import Kind, PoolKey

if TYPE_CHECKING:
    from .runs import ExecRequest


class PreExec(Kind):
    """A box entered ahead, its C waiting for a job just before ``execve``; its key is the root."""

    name = "exec"

    def key(self, spec: ExecRequest, root: tuple[Any, ...]) -> tuple[PoolKey, Any] | None:
        if spec.warm is None:
            return None
        return (self.name, root, ()), None

    def start(
        self, ctx: stages.ChildContext, control_fd: int, report_fd: int, timeout_w: int, stage: list[str]
    ) -> NoReturn:
        """Say ready, wait for the job, then do exactly what the cold path's C does with one."""
        stage[0] = "job"
        control = socket.socket(fileno=control_fd)
        # A dry run of the job's decoding, before saying ready: C is a fork of the server, and the first use of
        # each of the server's objects copies its page (reference counts); this way those copies happen now,
        # not on the run's path (C's work from the job to execve went from 0.31 to 0.14 ms at the median).
        dry = protocol.Decoder()
        dry.feed(protocol.encode(dict(stages.ChildContext().job(), fds=0)), [])
        stages.ChildContext.from_job(dry.frames()[0].header, [-1, -1], report_fd)
        stages.TIMEOUT_STRUCT.pack(0.0)
        control.sendall(b"R")
        job, _ = stages.receive_job(control, report_fd, timeout_w)  # B's timer starts now: time counts from hand-off
        control.close()
        stage[0] = "chdir"
        os.chdir("/work")  # the run's box, mounted over the pool folder's /work at hand-off
        stages.code_launch(job, stage)

    def job(self, ctx: stages.ChildContext, plan: Any) -> tuple[bytes, list[int]]:
        fds = [ctx.stdout, ctx.stderr, *([ctx.stdin] if ctx.stdin is not None else [])]
        return protocol.encode(dict(ctx.job(), fds=len(fds))), fds
