"""The script envd's ``bash -l -c`` runs for each command, the killer of a command's whole session, and the
signal an end event names.

envd signals a single pid and never kills a process whose request was cancelled (e2b-dev/infra
``packages/envd/internal/services/process/signal.go``, ``start.go``), so the code runs in a session of its own
and the driver kills that whole session.
"""

from __future__ import annotations

import math
import shlex

from mainsdk.driver import Command

from mainsdk_e2b.archive import archive_script
from mainsdk_e2b.layout import BASE_PATH, E2B_CA_BUNDLE, HOME, OUT, TRUST_VARIABLES, WORK

# The in-VM backstop kills the code this long past its deadline if the driver is gone (core's own grace).
BACKSTOP_GRACE = 5

# The raw wait status of the program, kept in a file (argv[1]) for the script; the waiter leads the session.
_WAITER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "status = os.waitpid(pid, 0)[1]\n"
    "open(sys.argv[1], 'w').write(str(status))\n"
    "sys.exit(os.waitstatus_to_exitcode(status) % 256)\n"
)
STATUS = "/tmp/mainsdk-status-{pid}"
# Go's names of the signals (syscall.Signal.String()), as envd's end event says them: "signal: <name>".
GO_SIGNALS = {
    "hangup": 1, "interrupt": 2, "quit": 3, "illegal instruction": 4, "trace/breakpoint trap": 5, "aborted": 6,
    "bus error": 7, "floating point exception": 8, "killed": 9, "user defined signal 1": 10,
    "segmentation fault": 11, "user defined signal 2": 12, "broken pipe": 13, "alarm clock": 14, "terminated": 15,
    "CPU time limit exceeded": 24, "file size limit exceeded": 25, "bad system call": 31,
}  # fmt: skip


def signal_of(error: str | None) -> int | None:
    """The signal number envd's end event names (``"signal: segmentation fault"``), or None."""
    if not error or not error.startswith("signal: "):
        return None
    name = error[len("signal: ") :].strip()
    if name.startswith("signal ") and name[len("signal ") :].isdigit():
        return int(name[len("signal ") :])
    return GO_SIGNALS.get(name)


# SIGSTOP every process of session $1 (so none can fork any more), a few passes, then SIGKILL them all. Plain
# /proc, no procps: the session is the 4th field after the name's closing ") " in /proc/PID/stat (proc(5)).
_KILL_SESSION = (
    'mainsdk_kill() { local s=$1 n f l p; [ -n "$s" ] || return 0; '
    "for n in STOP STOP STOP KILL KILL; do for f in /proc/[0-9]*/stat; do "
    'read -r l 2>/dev/null < "$f" || continue; set -- ${l##*") "}; [ "$4" = "$s" ] || continue; '
    'p=${f#/proc/}; kill -$n "${p%/stat}" 2>/dev/null; done; done; }'
)


def shell_line(
    command: Command,
    stdin_path: str | None = None,
    *,
    archive_limit: int | None = None,
    live: bool = False,
    trust: bool = False,
) -> str:
    """The script envd's ``bash -l -c`` runs: the program in a session of its own, then the clean-up.

    The program starts under ``setsid``, so it and everything it starts share a
    session no other process is in; when it ends (or at the in-VM backstop, a
    few seconds past its deadline, should the driver be gone) that whole
    session is killed, and with ``archive_limit`` (a run) the regular files of
    the out folder, sorted, up to that many bytes, are archived into one tar
    the driver reads in one request. The script exits with the program's status.

    ``env -i`` leaves the program only ``PATH``, ``HOME`` and the variables it
    was given; their values travel in the request's ``envs``, so the line
    names them but never holds a value. Each argument is quoted: no shell
    ever reads one. With ``trust`` (a box with egress headers) it also gets
    ``TRUST_VARIABLES``, each naming ``E2B_CA_BUNDLE``, before the given ones,
    so a variable the caller gives wins.
    """
    given = [f'{name}="${name}"' for name in sorted(command.env)]
    trusted = [f"{name}={E2B_CA_BUNDLE}" for name in TRUST_VARIABLES] if trust else []
    words = ["/usr/bin/setsid", '"${w8[@]}"', "/usr/bin/env", "-i", f"PATH={BASE_PATH}", f"HOME={HOME}"]
    words += [*trusted, *given]
    program = " ".join(words) + " " + shlex.join([command.program, *command.args])
    # Open the input, then remove it, so the work and out folders hold nothing of it. A live stdin is the script's
    # own (envd's pipe, started with stdin: true), handed on to the program.
    if live:
        stdin = "exec 3<&0"
    elif stdin_path is not None:
        stdin = f"exec 3<{stdin_path} && rm -f {stdin_path}"
    else:
        stdin = "exec 3</dev/null"
    backstop = math.ceil(command.timeout) + BACKSTOP_GRACE
    lines = [
        f"mkdir -p {WORK} {OUT} && cd {WORK} && {stdin} || exit 125",
        _KILL_SESSION,
        # bash's $? cannot tell a death by SIGSEGV from `exit 139`: a waiter keeps the raw wait status, when
        # the template has python3 (the base one does), and the script ends by that signal itself (below).
        f'sf={STATUS.format(pid="$$")}; rm -f -- "$sf"; w8=(); [ -x /usr/bin/python3 ] && '
        f'w8=(/usr/bin/python3 -E -s -c {shlex.quote(_WAITER)} "$sf")',
        # `&` without job control would give the program /dev/null as input: hence the explicit 0<&3.
        f"{program} 0<&3 3<&- &",
        "c=$!; exec 3<&-",
        # The backstop's stdio is /dev/null: envd ends the stream only when every holder of its pipes is gone.
        f"( sleep {backstop} & s=$!; trap 'kill $s; exit 0' TERM; wait $s; mainsdk_kill $c ) "
        "</dev/null >/dev/null 2>&1 &",
        "w=$!; wait $c; r=$?; kill $w 2>/dev/null; mainsdk_kill $c",
    ]
    if archive_limit is not None:
        lines.append(archive_script(archive_limit))
    # Killed by signal N: the script ends by N too, so envd's end event names it ("signal: segmentation
    # fault", handler.go); no core file. A status the waiter never wrote (killed at a limit) changes nothing.
    lines.append(
        'z=$(cat -- "$sf" 2>/dev/null); rm -f -- "$sf"; n=$(( ${z:-0} & 127 ))\n'
        'if [ "$n" -ne 0 ] && [ "$n" -ne 127 ]; then ulimit -c 0; trap - "$n"; kill -"$n" $$; fi'
    )
    lines.append("exit $r")
    return "\n".join(lines)


def killer_line(pid: int) -> str:
    """The command that kills what command ``pid`` started: every session led by a child of ``pid``.

    ``pid`` is the script of ``shell_line`` (the start event's pid); its one
    child that leads a session is the program's. Killing it lets the script go
    on to its clean-up and end.
    """
    return (
        f"{_KILL_SESSION}\n"
        'for f in /proc/[0-9]*/stat; do read -r l 2>/dev/null < "$f" || continue; p=${f#/proc/}; p=${p%/stat}; '
        f'set -- ${{l##*") "}}; [ "$2" = {int(pid)} ] && [ "$4" = "$p" ] && mainsdk_kill "$p"; done; true'
    )
