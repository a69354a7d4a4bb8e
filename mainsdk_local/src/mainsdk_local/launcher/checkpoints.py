"""Checkpoints of a box: filesystem snapshots and forks with overlayfs, pause with the cgroup freezer.

A snapshot freezes the box's work/ and tmp/ as a read-only layer in constant time, whatever the files hold:
the box's current upper layer (or, the first time, its plain folders, renamed) stops being written and becomes
the top lower layer; the box goes on with a new, empty upper over it. A box started from a snapshot gets the
snapshot's layers as its lowers and an upper of its own on its own tmpfs, so a write in one fork is seen by no
other, nor by the source. A layer is held by a detached clone of its mount (``open_tree``): its tmpfs lives on
after its box closes, for as long as a snapshot or a box uses it, and goes with the last one.

Each box's files belong to its own host uid, so a layer is mounted into another box through an idmapped mount
(the layer's uid shown as the box's): the fork's code can change and delete what it inherited, copied up into
its own upper, while the layer itself stays as it was.

Pause moves every process of the box's memory cgroup into a freezer cgroup of the box's (v1 ``freezer``) and
freezes it: memory is kept while the launcher lives. Standard library only, as the whole server.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import struct
import time
from typing import TYPE_CHECKING

from . import common, linux

if TYPE_CHECKING:
    from .runs import ServerBox

FOLDERS = ("work", "tmp")  # what a snapshot keeps; /out holds a command's results, not the box's state
FOLDER_MODES = {"work": 0o755, "tmp": 0o1777}
MAX_LAYERS = 40  # a box's lowers: each a path in the overlay's mount options, which one page must hold
SNAPSHOT_ID = re.compile(r"snap_[0-9a-f]{24}")
FREEZER = "/sys/fs/cgroup/freezer"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
MOUNT_ATTR_IDMAP = 0x100000
MOVE_MOUNT_F_EMPTY_PATH = 0x4


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def clone_tree(path: str | None, fd: int = linux.AT_FDCWD) -> int:
    """A detached copy of the mount at ``path`` (or of the detached mount ``fd``): an fd that holds its fs alive."""
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (AT_EMPTY_PATH if path is None else 0)
    name = b"" if path is None else path.encode()
    return _check(_libc.syscall(_SYS_OPEN_TREE, fd, name, flags), f"open_tree {path or fd}")


def _userns(inside: int, outside: int) -> int:
    """A user namespace mapping uid and gid ``inside`` to ``outside``: the idmap of a layer's mount."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only unshares and waits
        try:
            os.close(ready_r)
            os.close(go_w)
            if _libc.unshare(linux.CLONE_NEWUSER) == 0:
                os.write(ready_w, b"1")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError(errno.EPERM, "idmap: a user namespace could not be made")
        for name, line in (
            ("uid_map", f"{inside} {outside} 1"),
            ("setgroups", "deny"),
            ("gid_map", f"{inside} {outside} 1"),
        ):
            with open(f"/proc/{pid}/{name}", "w") as fh:
                fh.write(line)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(go_w)
        os.waitpid(pid, 0)


def attach(layer: Layer, target: str, uid: int) -> None:
    """Mount ``layer`` at ``target`` (an empty folder), its files shown as ``uid``'s when they are another's."""
    fd = clone_tree(None, layer.fd)
    try:
        if layer.uid != uid:
            ns = _userns(layer.uid, uid)
            try:
                attr = struct.pack("=QQQQ", MOUNT_ATTR_IDMAP, 0, 0, ns)
                _check(_libc.syscall(_SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, attr, len(attr)), "idmap layer")
            finally:
                os.close(ns)
        flags = MOVE_MOUNT_F_EMPTY_PATH
        _check(_libc.syscall(_SYS_MOVE_MOUNT, fd, b"", linux.AT_FDCWD, target.encode(), flags), "attach layer")
    finally:
        os.close(fd)


class Layer:
    """A frozen work/ and tmp/: a detached mount of its folder, and the uid that owns its files."""

    def __init__(self, fd: int, uid: int) -> None:
        self.fd = fd
        self.uid = uid
        self.users = 1  # snapshots and boxes holding it; its fd closes with the last

    def hold(self) -> Layer:
        self.users += 1
        return self

    def release(self) -> None:
        self.users -= 1
        if self.users == 0:
            common.close_fd(self.fd)
            self.fd = -1


class BoxLayers:
    """One box's overlay state: its lowers (top first), the generation of its upper, its mounts."""

    def __init__(self) -> None:
        self.lowers: list[Layer] = []
        self.gen = 0  # 0: work/ and tmp/ are plain folders; N: overlays with upper .ck/gN
        self.mounts: list[str] = []  # attached layers and overlays, unmounted when replaced
        self.freezer: str | None = None
        self.paused = False


class Checkpoints:
    """The server's snapshots (by id) and each box's layers."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.snapshots: dict[str, list[Layer]] = {}
        self.boxes: dict[int, BoxLayers] = {}  # by box slot
        self._mounts = 0
        self.freezer_ok = os.path.isdir(FREEZER) and os.access(FREEZER, os.W_OK)

    def of(self, box: ServerBox) -> BoxLayers:
        return self.boxes.setdefault(box.slot, BoxLayers())

    # -- snapshots ----------------------------------------------------------------------------------------

    def snapshot(self, box: ServerBox, snapshot_id: object) -> None:
        """Freeze the box's work/ and tmp/ as snapshot ``snapshot_id``; the box goes on over a new upper."""
        if not isinstance(snapshot_id, str) or not SNAPSHOT_ID.fullmatch(snapshot_id):
            raise common.RequestError("value", "snapshot must be snap_ and 24 hex digits")
        if snapshot_id in self.snapshots:
            raise common.RequestError("value", f"snapshot {snapshot_id} exists")
        if box.runs:
            raise common.RequestError("launcher", "a command runs in the box: end it before a snapshot")
        state = self.of(box)
        if state.paused:
            raise common.RequestError("launcher", "the box is paused")
        if state.gen > 0 and self._unchanged(box, state):
            # Nothing written since the last layer froze (forks in a row): the snapshot is the same layers.
            self.snapshots[snapshot_id] = [lower.hold() for lower in state.lowers]
            return
        if len(state.lowers) >= MAX_LAYERS:
            raise common.RequestError("value", f"the box is {MAX_LAYERS} snapshots deep; start a new session")
        ck = os.path.join(box.path, ".ck")
        try:
            os.makedirs(ck, 0o700, exist_ok=True)
            common.close_fd(box.work_fd)
            box.work_fd = -1
            frozen = os.path.join(ck, f"g{state.gen}")
            if state.gen == 0:
                os.mkdir(frozen, 0o711)
                os.chmod(frozen, 0o711)
                for name in FOLDERS:  # the plain folders become the layer: a rename, whatever they hold
                    os.rename(os.path.join(box.path, name), os.path.join(frozen, name))
                    os.mkdir(os.path.join(box.path, name), FOLDER_MODES[name])
                    os.chmod(os.path.join(box.path, name), FOLDER_MODES[name])
                    os.chown(os.path.join(box.path, name), box.uid, box.gid)
            else:
                self._unmount(state)  # the upper stops being written: nothing runs and no mount is left on it
            layer = Layer(clone_tree(frozen), box.uid)
            state.lowers.insert(0, layer)
            self.snapshots[snapshot_id] = [lower.hold() for lower in state.lowers]
            self._mount(box, state)
        except OSError as exc:
            raise common.launch_error("snapshot", exc) from None

    @staticmethod
    def _unchanged(box: ServerBox, state: BoxLayers) -> bool:
        """Whether the box's uppers are empty: any change (a write, a removal's whiteout) puts an entry there."""
        upper = os.path.join(box.path, ".ck", f"g{state.gen}")
        try:
            return not any(os.listdir(os.path.join(upper, name)) for name in FOLDERS)
        except OSError:
            return False

    def start_from(self, box: ServerBox, snapshot_id: object) -> None:
        """A new box's work/ and tmp/ as snapshot ``snapshot_id`` left them, over an upper of its own."""
        layers = self.snapshots.get(snapshot_id) if isinstance(snapshot_id, str) else None
        if layers is None:
            raise common.RequestError("value", f"no snapshot {snapshot_id!r:.40} in this launcher")
        state = self.of(box)
        state.lowers = [layer.hold() for layer in layers]
        try:
            common.close_fd(box.work_fd)
            box.work_fd = -1
            os.mkdir(os.path.join(box.path, ".ck"), 0o700)
            self._mount(box, state)
        except OSError as exc:
            raise common.launch_error("snapshot", exc) from None

    def forget(self, snapshot_id: object) -> None:
        """Delete a snapshot: boxes started from it keep their layers."""
        layers = self.snapshots.pop(snapshot_id, None) if isinstance(snapshot_id, str) else None
        for layer in layers or []:
            layer.release()

    def _mount(self, box: ServerBox, state: BoxLayers) -> None:
        state.gen += 1
        upper = os.path.join(box.path, ".ck", f"g{state.gen}")
        # Traversable: a layer's root is root's, which an idmapped mount of it shows as no one's, and root's
        # own override does not reach an inode of an unmapped owner. Only the launcher's namespace sees .ck.
        os.mkdir(upper, 0o711)
        os.chmod(upper, 0o711)
        points = []
        for layer in state.lowers:
            self._mounts += 1
            point = os.path.join(box.path, ".ck", f"m{self._mounts}")
            os.mkdir(point, 0o700)
            attach(layer, point, box.uid)
            state.mounts.append(point)
            points.append(point)
        for name in FOLDERS:
            up, wd = os.path.join(upper, name), os.path.join(upper, f"{name}.w")
            os.mkdir(up, FOLDER_MODES[name])
            os.chmod(up, FOLDER_MODES[name])
            os.chown(up, box.uid, box.gid)
            os.mkdir(wd, 0o700)
            lower = ":".join(os.path.join(p, name) for p in points)
            target = os.path.join(box.path, name)
            linux.mount(
                "overlay",
                target,
                "overlay",
                linux.MS_NOSUID | linux.MS_NODEV,
                f"lowerdir={lower},upperdir={up},workdir={wd}",
            )
            state.mounts.append(target)
        box.work_fd = os.open(os.path.join(box.path, "work"), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    @staticmethod
    def _unmount(state: BoxLayers) -> None:
        for point in reversed(state.mounts):
            linux.umount(point)
        state.mounts = []

    def box_destroyed(self, box: ServerBox) -> None:
        """The box is gone: its layers are released (a snapshot of it keeps its own), its freezer removed."""
        state = self.boxes.pop(box.slot, None)
        if state is None:
            return
        for layer in state.lowers:
            layer.release()
        if state.freezer is not None:
            with contextlib.suppress(OSError):
                os.rmdir(state.freezer)

    # -- pause --------------------------------------------------------------------------------------------

    def pause(self, box: ServerBox) -> None:
        """Freeze every process of the box (its memory cgroup's tree) in the box's freezer cgroup."""
        state = self.of(box)
        if state.paused:
            return
        if not self.freezer_ok:
            raise common.RequestError("launcher", "no cgroup freezer here to pause a box with")
        if box.runs and box.memory_cgroup is None:
            raise common.RequestError("launcher", "the box's commands have no cgroup to pause them by")
        try:
            if state.freezer is None:
                path = os.path.join(FREEZER, f"{self.tag}box-{box.slot}-{time.monotonic_ns()}")
                os.mkdir(path)
                state.freezer = path
            self._write(state.freezer, "freezer.state", "FROZEN")
            for _ in range(1000):  # a process forked while the others moved is moved too: until none is left
                strays = [pid for pid in self._members(box.memory_cgroup) if pid not in self._procs(state.freezer)]
                if not strays and self._state(state.freezer) == "FROZEN":
                    break
                for pid in strays:
                    with contextlib.suppress(ProcessLookupError, OSError):
                        self._write(state.freezer, "cgroup.procs", str(pid))
                time.sleep(0.001)
            else:
                raise OSError(errno.EBUSY, "the box's processes could not all be frozen")
        except OSError as exc:
            self.resume(box)
            raise common.launch_error("pause", exc) from None
        state.paused = True

    def resume(self, box: ServerBox) -> None:
        """Thaw the box's processes, as they were."""
        state = self.boxes.get(box.slot)
        if state is None or state.freezer is None:
            return
        with contextlib.suppress(OSError):
            self._write(state.freezer, "freezer.state", "THAWED")
        state.paused = False

    def is_paused(self, box: ServerBox) -> bool:
        state = self.boxes.get(box.slot)
        return state is not None and state.paused

    @staticmethod
    def _write(path: str, name: str, value: str) -> None:
        with open(os.path.join(path, name), "w") as fh:
            fh.write(value)

    @staticmethod
    def _state(path: str) -> str:
        with open(os.path.join(path, "freezer.state")) as fh:
            return fh.read().strip()

    @staticmethod
    def _procs(path: str) -> set[int]:
        try:
            with open(os.path.join(path, "cgroup.procs")) as fh:
                return {int(x) for x in fh.read().split()}
        except OSError:
            return set()

    def _members(self, root: str | None) -> list[int]:
        if root is None:
            return []
        found: list[int] = []
        for folder, _dirs, _files in os.walk(root):
            found.extend(self._procs(folder))
        return found

    def shutdown(self) -> None:
        """Thaw every box (a frozen process cannot die) and let every layer go."""
        for state in self.boxes.values():
            if state.freezer is not None:
                with contextlib.suppress(OSError):
                    self._write(state.freezer, "freezer.state", "THAWED")
        for snapshot_id in list(self.snapshots):
            self.forget(snapshot_id)


def probe(base: str, uid: int) -> str:
    """Why filesystem checkpoints cannot work here, or "" when a layer mounts idmapped under an overlay."""
    root = os.path.join(base, f"ck-probe-{os.getpid()}")
    try:
        os.mkdir(root, 0o700)
    except OSError as exc:
        return f"no folder for the probe: {exc.strerror}"
    mounted = False
    try:
        linux.mount("tmpfs", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=1m,mode=0700")
        mounted = True
        for name in ("l", "u", "w", "m", "o"):
            os.mkdir(os.path.join(root, name), 0o755)
        os.chown(os.path.join(root, "l"), uid, uid)
        layer = Layer(clone_tree(os.path.join(root, "l")), uid)
        try:
            attach(layer, os.path.join(root, "m"), uid + 1)
        finally:
            layer.release()
        opts = f"lowerdir={root}/m,upperdir={root}/u,workdir={root}/w"
        linux.mount("overlay", os.path.join(root, "o"), "overlay", linux.MS_NOSUID | linux.MS_NODEV, opts)
        return ""
    except OSError as exc:
        return f"overlayfs over an idmapped layer failed: {exc.strerror or exc}"
    finally:
        if mounted:
            with contextlib.suppress(OSError):
                linux.umount(root)  # lazily, with the layer and overlay mounts under it
        with contextlib.suppress(OSError):
            os.rmdir(root)
