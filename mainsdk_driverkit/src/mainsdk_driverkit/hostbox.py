"""What a driver whose box is a folder on this host, and each command a subprocess in it, would write anyway.

A driver that runs code in a folder of the machine it runs on (a temp folder, or one bind-mounted into
a container or a VM) has to get the same three things right, and each is easy to get wrong:

- ``run_subprocess``: a command in its own session so its whole process group can be killed, and is,
  at its timeout and when core cancels the hook (output limit, backstop deadline). Output is pushed to
  core as the pipes deliver it, through a protocol instead of stream readers, so there is no reader to
  cancel and no ``Process.wait()`` left pending on a pipe (the asyncio trap the example driver's README
  describes); its exit is taken from the process, so a grandchild holding the pipes open does not turn
  a finished command into a timeout.
- ``collect_folder``: the out folder's regular files, never following a link the code made, bounded in
  files, entries and depth whatever tree the code left.
- ``HostBox``: the folder itself, files in, reads and writes in either folder through descriptors
  opened without following links (``write_under``), and removal.

Using them is optional and changes nothing in the contract: the hooks stay the driver's own, and the
third-party driver in ``conformance/tests/third_party_driver`` shows a whole driver built on them.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
from mainsdk.driver import (
    INVALID_OPTION,
    NO_SESSION,
    OUTPUT,
    BoxSpec,
    Collected,
    Command,
    ExecOutcome,
    Folder,
    OutFile,
    OutputSink,
    RunLimits,
    SandboxError,
    StopReason,
    UnsafeName,
    check_name,
)

DRAIN_SECONDS = 2.0  # after the command's group is killed: how long a pipe held by an escaped process is waited for
# Bounds on collecting the out folder, the local driver's (its README's "Out files"): past one, the run stops
# with "output" and keeps what fit, whatever tree the code left.
MAX_OUT_FILES = 1000
MAX_OUT_ENTRIES = 10_000
MAX_OUT_DEPTH = 32
MAX_OUT_SKIPPED = 100
# What execve says of a program that is not one: missing, not executable, a folder, not a binary or script.
_NOT_A_PROGRAM = {errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.EISDIR, errno.ENOEXEC, errno.ELOOP}
_NOFOLLOW_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a fifo the code left is opened at once rather than waiting for a writer, then skipped by its type.
_NOFOLLOW_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Pushed(asyncio.SubprocessProtocol):
    """Sends each chunk of output to core as it arrives, and notes when the process exits."""

    def __init__(self, output: OutputSink, loop: asyncio.AbstractEventLoop) -> None:
        self.output = output
        self.exited = loop.create_future()
        self.pipes_closed = loop.create_future()
        self.open_pipes = {1, 2}
        self.sink_error: Exception | None = None
        self.sink_failed = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        """A chunk of stdout (1) or stderr (2)."""
        if self.sink_error is not None:
            return
        try:
            (self.output.stdout if fd == 1 else self.output.stderr)(data)
        except Exception as exc:  # noqa: BLE001 - the sink's own (an app's on_output): raised from the hook
            # Raised here it would only reach the loop's exception handler, and the run would go on as if
            # nothing happened; run_subprocess kills the command and raises it instead.
            self.sink_error = exc
            self.sink_failed.set_result(None)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        """A pipe closed: once both output pipes are, nothing more can come."""
        self.open_pipes.discard(fd)
        if not self.open_pipes and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        """The process itself ended (and was reaped); its pipes may still be held by what it started."""
        if not self.exited.done():
            self.exited.set_result(None)


def _memory_cap(limit: int) -> Callable[[], None]:
    def apply() -> None:  # in the child, between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, signal.SIGKILL)


async def run_subprocess(
    executable: str,
    command: Command,
    output: OutputSink,
    *,
    cwd: str | os.PathLike[str],
    memory: int | None = None,
) -> ExecOutcome:
    """Run ``executable`` with ``command``'s arguments, stdin and environment (nothing of the app's) in ``cwd``.

    The command gets its own session (setsid), so it and everything it starts in that group are killed
    with SIGKILL when it passes ``command.timeout`` (``stop="timeout"``), when the calling task is
    cancelled (the kill happens before the cancel goes on), and when it ends on its own (what it left
    running goes too). ``memory`` caps each process's address space (``RLIMIT_AS``: per process, so a
    driver using it declares ``memory_limit_scope="process"``). A command killed by a signal is reported
    by the signal's name (``ExecOutcome.signal``), so core reports ``128 + N``. An exception from
    ``output`` (an app's ``on_output`` raising) kills the command too, and is raised from here, as core
    expects of an exec hook. A process that left the
    group (``setsid`` again) escapes the kill: that is weak isolation, and a driver built on this declares
    ``isolation="weak"`` unless its box confines the process another way.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    stdin = asyncio.subprocess.PIPE if command.stdin else asyncio.subprocess.DEVNULL
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: _Pushed(output, loop),
            executable,
            *command.args,
            cwd=cwd,
            env=dict(command.env),  # only what core passes: never the app's environment
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_memory_cap(memory) if memory is not None else None,
        )
    except OSError as exc:
        if exc.errno not in _NOT_A_PROGRAM:
            raise  # out of processes, descriptors or memory: an outage, for core to report as one
        # A program that is not there, or cannot be run, is the caller's to fix, not an outage; nothing ran.
        message = f"cannot start {command.program!r} in the box: {exc.strerror}"
        raise SandboxError(INVALID_OPTION, message, ran=False) from None
    pid = transport.get_pid()
    stop: StopReason | None = None
    try:
        if command.stdin:
            # Buffered by the transport and written as the code reads: code that never reads its stdin
            # cannot block this hook, and a closed pipe (the code exited) is the transport's to handle.
            feed = transport.get_pipe_transport(0)
            assert isinstance(feed, asyncio.WriteTransport)
            feed.write(command.stdin)
            feed.write_eof()
        woken, _ = await asyncio.wait(
            [protocol.exited, protocol.sink_failed], timeout=command.timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if not woken:
            stop = "timeout"
    finally:
        try:
            _kill_group(pid)  # also on cancel: nothing the command started in its group outlives the hook
            await asyncio.wait([protocol.exited], timeout=DRAIN_SECONDS)
            # What it wrote before it ended is still in the pipes: take it, unless an escaped process holds them.
            await asyncio.wait([protocol.pipes_closed], timeout=DRAIN_SECONDS)
        finally:
            transport.close()
    if protocol.sink_error is not None:
        raise protocol.sink_error
    duration = loop.time() - started
    returncode = transport.get_returncode()
    if stop is not None or returncode is None:
        return ExecOutcome(exit_code=None, stop=stop, duration=duration)
    if returncode < 0:  # killed by signal N: by name, since the host's numbering may not be Linux's
        return ExecOutcome(exit_code=None, duration=duration, signal=_signal_name(-returncode))
    return ExecOutcome(exit_code=returncode, duration=duration)


def _signal_name(number: int) -> int | str:
    """The signal's name (``SIGSEGV``), else its number (a real-time signal has no name of its own)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return number


@attrs.define
class HostBox:
    """A box that is a temp folder on this host: ``work/`` (the code's working folder) and ``out/`` beside it.

    ``create`` makes it with the spec's files; ``write`` and ``read`` take the paths core hands to the
    ``write_file`` and ``read_file`` hooks; ``collect`` is the ``collect`` hook's answer; ``remove``
    deletes it all. Every path is walked from an open folder, one part at a time, never following a link,
    so a link the code made cannot lead a read or a write out of the box.
    """

    id: str
    root: Path
    limits: RunLimits

    @classmethod
    def create(cls, spec: BoxSpec, *, prefix: str = "mainsdk-box-") -> HostBox:
        """A new box for ``spec``, its files written into ``work/``."""
        box = cls(spec.id, Path(tempfile.mkdtemp(prefix=prefix)), spec.limits)
        try:
            box.work.mkdir()
            box.out.mkdir()
            for path, data in spec.files.items():
                box.write(Folder.WORK, path, data)
        except BaseException:
            box.remove()
            raise
        return box

    @property
    def work(self) -> Path:
        """The code's working folder."""
        return self.root / "work"

    @property
    def out(self) -> Path:
        """The folder whose files come back (``../out/`` from the working folder)."""
        return self.root / "out"

    def folder(self, folder: Folder) -> Path:
        """The host folder behind one of the box's folders."""
        return self.out if folder is Folder.OUT else self.work

    def write(self, folder: Folder, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` in ``folder`` (folders on the way made as needed)."""
        try:
            write_under(self.folder(folder), path, data, make=False)
        except UnsafeName as exc:
            raise SandboxError(INVALID_OPTION, f"cannot write {path!r} in the box: {exc}", ran=False) from None

    def read(self, folder: Folder, path: str) -> bytes:
        """The bytes of ``path`` in ``folder``.

        A path that is missing, or is not a regular file, is ``MAIN-SANDBOX-0008`` (404): a retry would not
        help, so it is not an outage.
        """
        missing = SandboxError(NO_SESSION, f"no file {path!r} in the session", status=404, ran=False)
        try:
            parts = check_name(path)
            with _opened_folder(self.folder(folder), parts[:-1]) as dir_fd:
                fd = os.open(parts[-1], _NOFOLLOW_FILE, dir_fd=dir_fd)
        except (UnsafeName, OSError):
            raise missing from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise missing
        with os.fdopen(fd, "rb") as file:
            # Never more than the box may hold: a file the code is still growing cannot fill the app's memory.
            data = file.read(self.limits.disk + 1)
        if len(data) > self.limits.disk:  # a whole file or none: a cut one would pass for the file
            message = f"{path!r} is larger than limits.disk ({self.limits.disk} bytes); nothing was read"
            raise SandboxError(OUTPUT, message, ran=False)
        return data

    def collect(self, max_bytes: int) -> Collected:
        """The regular files of ``out/``, at most ``max_bytes`` in all (``collect_folder``)."""
        return collect_folder(self.out, max_bytes)

    def remove(self) -> None:
        """Delete the box's folder and everything in it (never following a link out of it)."""
        shutil.rmtree(self.root, ignore_errors=True)


def write_under(directory: str | os.PathLike[str], name: str, data: bytes, *, make: bool = True) -> Path:
    """Write ``data`` to ``directory/name`` (its folders made as needed) and return that path.

    ``UnsafeName`` when the name is not a plain relative path, or when a part of
    it on disk is a symlink or not a folder; nothing is then written.
    ``make=False``: ``directory`` must already exist and is itself opened without
    following a link (a box's folder, which code in the box could have replaced).
    """
    parts = check_name(name)
    root = Path(directory)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    if make:
        root.mkdir(parents=True, exist_ok=True)
    else:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        raise UnsafeName(f"the folder is a symlink or not a folder ({exc.strerror})") from None
    try:
        for part in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise UnsafeName(f"{part!r} in the folder is a symlink or not a folder ({exc.strerror})") from None
            os.close(fd)
            fd = child
        # O_NONBLOCK: a fifo already there fails at once rather than waiting for a reader; truncated only once
        # known to be a regular file.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            out = os.open(parts[-1], flags, 0o644, dir_fd=fd)
        except OSError as exc:
            raise UnsafeName(f"it is a symlink or not a regular file in the folder ({exc.strerror})") from None
        with os.fdopen(out, "wb") as file:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                raise UnsafeName("it is not a regular file in the folder")
            os.ftruncate(out, 0)
            file.write(data)
    finally:
        os.close(fd)
    return root.joinpath(*parts)


@contextlib.contextmanager
def _opened_folder(folder: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of ``folder/parts...``, each part opened from the last without following a link."""
    fd = os.open(folder, _NOFOLLOW_DIR)
    try:
        for part in parts:
            child = os.open(part, _NOFOLLOW_DIR, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


@attrs.define
class _Collection:
    max_bytes: int
    files: list[OutFile] = attrs.field(factory=list)
    skipped: list[tuple[str, str]] = attrs.field(factory=list)
    skipped_more: int = 0
    total: int = 0
    entries: int = 0
    truncated: bool = False  # something was left out: core stops the run with "output"
    full: bool = False  # a bound on what is returned was reached: take nothing more

    def skip(self, name: str, why: str) -> None:
        if len(self.skipped) < MAX_OUT_SKIPPED:
            self.skipped.append((name[:200], why))
        else:
            self.skipped_more += 1

    def result(self) -> Collected:
        more = [("...", f"{self.skipped_more} more skipped entries not listed")] if self.skipped_more else []
        return Collected(tuple(self.files), self.truncated, (*self.skipped, *more))


def collect_folder(folder: str | os.PathLike[str], max_bytes: int) -> Collected:
    """The regular files under ``folder`` (names relative to it, in posix form), at most ``max_bytes`` in all.

    Never follows a link: a symlink, a fifo, a socket is named in ``skipped`` and not read. A file larger
    than what is left of ``max_bytes`` is named in ``skipped`` and the walk goes on, so smaller files after
    it still come back. At most ``MAX_OUT_FILES`` files, ``MAX_OUT_ENTRIES`` entries looked at and
    ``MAX_OUT_DEPTH`` folders deep; any cut sets ``truncated``, which core reports as ``stop="output"``.
    Within a folder, files come in name order, then its subfolders.
    """
    collection = _Collection(max_bytes)
    try:
        root = os.open(folder, _NOFOLLOW_DIR)
    except OSError as exc:
        collection.skip("", f"unreadable folder: {exc.strerror}")
        return collection.result()
    try:
        _collect_from(root, "", 0, collection)
    finally:
        os.close(root)
    return collection.result()


def _collect_from(dir_fd: int, prefix: str, depth: int, collection: _Collection) -> None:
    names: list[tuple[str, bool]] = []  # (name, is a folder)
    with os.scandir(dir_fd) as listing:
        for entry in listing:
            if collection.entries >= MAX_OUT_ENTRIES:
                collection.truncated = True
                break
            collection.entries += 1
            names.append((entry.name, entry.is_dir(follow_symlinks=False)))
    names.sort()
    for name, is_dir in names:
        if not is_dir:
            _take(dir_fd, name, prefix + name, collection)
            if collection.full:
                return
    for name, is_dir in names:
        if not is_dir:
            continue
        if depth + 1 > MAX_OUT_DEPTH:
            collection.truncated = True  # deeper folders are not entered: a cut, like the byte limit
            return
        try:
            sub = os.open(name, _NOFOLLOW_DIR, dir_fd=dir_fd)
        except OSError as exc:
            collection.skip(prefix + name, f"unreadable folder: {exc.strerror}")
            continue
        try:
            _collect_from(sub, f"{prefix}{name}/", depth + 1, collection)
        except OSError as exc:
            collection.skip(prefix + name, f"unreadable folder: {exc.strerror}")
        finally:
            os.close(sub)
        if collection.full:
            return


def _take(dir_fd: int, name: str, relative: str, collection: _Collection) -> None:
    """Read one entry that is not a folder: a regular file is kept, anything else is named with its kind."""
    try:
        fd = os.open(name, _NOFOLLOW_FILE, dir_fd=dir_fd)
    except OSError as exc:  # a symlink (ELOOP), a socket (ENXIO)
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                collection.skip(relative, "a symbolic link")
                return
        collection.skip(relative, f"not readable: {exc.strerror}")
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        collection.skip(relative, "not a regular file")
        return
    with os.fdopen(fd, "rb") as file:
        if len(collection.files) >= MAX_OUT_FILES:
            collection.truncated = collection.full = True  # one more regular file than may be returned
            return
        budget = collection.max_bytes - collection.total
        data = file.read(budget + 1)  # never more than fits, whatever size the file claims or grows to
    if len(data) > budget:
        collection.truncated = True
        collection.skip(relative, "larger than what is left of limits.files")
        return
    collection.total += len(data)
    collection.files.append(OutFile(relative, data))
