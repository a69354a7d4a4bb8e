"""A per-box bound on inet sockets: two cgroup BPF programs count them in a map, one slot per box.

Standard library only (``ctypes`` for the ``bpf`` system call); the programs are assembled here by hand.

Every process of a box runs as the box's own host uid (``uid_base + slot``), so the count is kept per uid:

- ``BPF_CGROUP_INET_SOCK_CREATE`` runs at the end of ``socket()`` for AF_INET and AF_INET6 (TCP, UDP, every
  inet type). For a uid of this server's range it adds one to the slot's count; past the slot's bound it
  takes its one back and refuses with EMFILE, the error a full descriptor table gives. A socket it let
  through is marked in socket-local storage with its slot.
- ``BPF_CGROUP_INET_SOCK_RELEASE`` runs when a socket is released (its last descriptor closed, wherever that
  happens: a process that was passed it, an exiting process, the kernel's garbage collection of a descriptor
  in flight). Only a marked socket gives its place back, and only once: accepted sockets, which the kernel
  makes without ``socket()``, were never counted and are never subtracted.

An accepted socket needs a connecting socket of the same box (a box's network namespace reaches nothing else
but the proxy listener, which is not the box's to accept on), so a box holds at most twice its bound.
``socketpair(AF_UNIX)`` and netlink route sockets are not counted: their memory is charged to the box's cgroup.

The programs are attached with ``BPF_LINK_CREATE`` to a cgroup v2 directory holding every run: they go away
with the server (its link descriptors) and with the directory. Needs root (``CAP_BPF``/``CAP_SYS_ADMIN``),
a cgroup2 hierarchy and Linux 5.18+ (``bpf_set_retval``; socket storage from cgroup sock programs).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct
from collections.abc import Callable

# bpf(2)'s number where this launcher runs; elsewhere ENOSYS (the bound is then reported unavailable).
_SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine, -1)
_libc = ctypes.CDLL(None, use_errno=True)

# bpf(2) commands, map and program types, attach types, helpers (include/uapi/linux/bpf.h).
_MAP_CREATE, _MAP_LOOKUP_ELEM, _MAP_UPDATE_ELEM, _PROG_LOAD, _BTF_LOAD, _LINK_CREATE = 0, 1, 2, 5, 18, 28
_MAP_TYPE_ARRAY, _MAP_TYPE_SK_STORAGE = 2, 24
_F_NO_PREALLOC = 1
_PROG_TYPE_CGROUP_SOCK = 9
_INET_SOCK_CREATE, _INET_SOCK_RELEASE = 2, 34
_HELPER_MAP_LOOKUP, _HELPER_UID_GID, _HELPER_SK_STORAGE_GET, _HELPER_SET_RETVAL = 1, 15, 107, 187
_SK_STORAGE_CREATE = 1

# Errors that mean this machine cannot have the bound (not a passing failure): no permission, no bpf, a kernel
# without one of the helpers or attach types (the verifier's EINVAL), no cgroup2 to attach to.
UNAVAILABLE = frozenset({errno.EPERM, errno.EACCES, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOENT})


def _bpf(cmd: int, attr: bytearray) -> int:
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    fd: int = _libc.syscall(_SYS_BPF, cmd, buf, len(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf command {cmd}: {os.strerror(err)}")
    return fd


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _ld_map(dst: int, map_fd: int) -> bytes:
    """``dst = map`` (ld_imm64 with BPF_PSEUDO_MAP_FD): two instruction slots."""
    return _insn(0x18, dst, 1, 0, map_fd) + _insn(0)


# Instructions used below (BPF_CLASS | BPF_OP | BPF_SRC).
_MOV64_X, _MOV64_K, _ADD64_K, _MOV32_X, _SUB32_K = 0xBF, 0xB7, 0x07, 0xBC, 0x14
_LSH64_K, _RSH64_K, _AND64_K, _OR64_X = 0x67, 0x77, 0x57, 0x4F
_CALL, _EXIT = 0x85, 0x95
_STX_W, _ST_W, _LDX_W, _LDX_DW, _STX_DW, _ATOMIC_DW = 0x63, 0x62, 0x61, 0x79, 0x7B, 0xDB
_JGE_K, _JEQ_K, _JGE_X, _JEQ_X, _JNE_X = 0x35, 0x15, 0x3D, 0x1D, 0x5D
_FETCH_ADD, _ADD, _CMPXCHG = 0x01, 0x00, 0xF1
Jump = tuple[int, int, int, int, str]  # (code, dst, src, imm, label)
Item = bytes | Jump | str  # an instruction, a jump to a label, or a label


def _assemble(items: list[Item]) -> bytes:
    """Instructions with symbolic jumps: a str is a label, a Jump's offset is filled in from it."""
    labels: dict[str, int] = {}
    slot = 0
    for item in items:
        if isinstance(item, str):
            labels[item] = slot
        else:
            slot += 1 if isinstance(item, tuple) else len(item) // 8
    out = bytearray()
    slot = 0
    for item in items:
        if isinstance(item, str):
            continue
        if isinstance(item, tuple):
            code, dst, src, imm, label = item
            out += _insn(code, dst, src, labels[label] - (slot + 1), imm)
            slot += 1
        else:
            out += item
            slot += len(item) // 8
    return bytes(out)


# A slot's count is one 64-bit word: the slot's generation in the top 16 bits, the count in the low 48. A box
# that takes a slot starts a new generation at zero (``SocketBound.set_bound(fresh=True)``), and every mark
# carries the generation it was counted in: a socket of an earlier holder released late (a descriptor the
# kernel collected from a dead box's queue) gives nothing back to the new one, and a place an earlier box lost
# (see ``SocketBound``) never outlives it.
GEN_SHIFT = 48
COUNT_MASK = (1 << GEN_SHIFT) - 1
_RELEASE_TRIES = 4  # compare-and-swap attempts when racing releases: a lost race keeps a place taken, never frees one


def _create_program(counts: int, bounds: int, marks: int, uid_base: int, slots: int) -> bytes:
    """On socket(): count the socket against its box's slot, or refuse it with EMFILE past the bound."""
    base = struct.unpack("<i", struct.pack("<I", uid_base & 0xFFFFFFFF))[0]  # 32-bit arithmetic: wraps
    return _assemble(
        [
            _insn(_MOV64_X, 6, 1),  # r6 = the socket (ctx)
            _insn(_CALL, imm=_HELPER_UID_GID),  # r0 = gid << 32 | uid, as the initial user namespace sees them
            _insn(_MOV32_X, 0, 0),  # w0 = uid
            _insn(_SUB32_K, 0, imm=base),  # w0 = uid - uid_base (mod 2**32)
            (_JGE_K, 0, 0, slots, "allow"),  # not a box of this server
            _insn(_MOV64_X, 7, 0),  # r7 = slot
            _insn(_STX_W, 10, 0, -4),  # key on the stack
            _ld_map(1, counts),
            _insn(_MOV64_X, 2, 10),
            _insn(_ADD64_K, 2, imm=-4),
            _insn(_CALL, imm=_HELPER_MAP_LOOKUP),
            (_JEQ_K, 0, 0, 0, "allow"),  # cannot happen (an array, slot < slots); the verifier wants the check
            _insn(_MOV64_X, 8, 0),  # r8 = &word
            _insn(_MOV64_K, 1, imm=1),
            _insn(_ATOMIC_DW, 8, 1, 0, _FETCH_ADD),  # r1 = word++ (atomic: racing creators each see their own)
            _insn(_STX_DW, 10, 1, -16),  # the word before ours, for its generation
            _insn(_MOV64_X, 9, 1),
            _insn(_LSH64_K, 9, imm=64 - GEN_SHIFT),
            _insn(_RSH64_K, 9, imm=64 - GEN_SHIFT),  # r9 = the count before ours
            _insn(_STX_W, 10, 7, -4),
            _ld_map(1, bounds),
            _insn(_MOV64_X, 2, 10),
            _insn(_ADD64_K, 2, imm=-4),
            _insn(_CALL, imm=_HELPER_MAP_LOOKUP),
            (_JEQ_K, 0, 0, 0, "deny"),
            _insn(_LDX_DW, 1, 0, 0),  # r1 = the slot's bound
            (_JGE_X, 9, 1, 0, "deny"),  # the box already holds its bound
            _ld_map(1, marks),
            _insn(_MOV64_X, 2, 6),
            _insn(_MOV64_K, 3, imm=0),
            _insn(_MOV64_K, 4, imm=_SK_STORAGE_CREATE),
            _insn(_CALL, imm=_HELPER_SK_STORAGE_GET),
            (_JEQ_K, 0, 0, 0, "deny"),  # no memory for the mark: refuse rather than count what release cannot see
            _insn(_LDX_DW, 1, 10, -16),
            _insn(_RSH64_K, 1, imm=GEN_SHIFT),
            _insn(_LSH64_K, 1, imm=16),  # generation << 16
            _insn(_MOV64_X, 2, 7),
            _insn(_ADD64_K, 2, imm=1),
            _insn(_OR64_X, 1, 2),
            _insn(_STX_W, 0, 1, 0),  # mark = generation << 16 | slot + 1 (0: not counted)
            "allow",
            _insn(_MOV64_K, 0, imm=1),
            _insn(_EXIT),
            "deny",  # take our one back: the socket is freed without a release (sk_common_release)
            _insn(_MOV64_K, 1, imm=-1),
            _insn(_ATOMIC_DW, 8, 1, 0, _ADD),
            _insn(_MOV64_K, 1, imm=-errno.EMFILE),
            _insn(_CALL, imm=_HELPER_SET_RETVAL),
            _insn(_MOV64_K, 0, imm=0),
            _insn(_EXIT),
        ]
    )


def _release_program(counts: int, marks: int) -> bytes:
    """On release: a socket the create program counted gives its place back, once, to its own generation."""
    give_back: list[Item] = []
    for _ in range(_RELEASE_TRIES):  # unrolled: the verifier takes no loop here
        give_back += [
            _insn(_LDX_DW, 0, 8, 0),  # r0 = the word now (cmpxchg's expected value)
            _insn(_MOV64_X, 1, 0),
            _insn(_RSH64_K, 1, imm=GEN_SHIFT),
            (_JNE_X, 1, 7, 0, "out"),  # counted in an earlier box's generation: nothing to give this one
            _insn(_MOV64_X, 1, 0),
            _insn(_LSH64_K, 1, imm=64 - GEN_SHIFT),
            (_JEQ_K, 1, 0, 0, "out"),  # a count of zero is never taken below zero
            _insn(_MOV64_X, 3, 0),
            _insn(_MOV64_X, 2, 0),
            _insn(_ADD64_K, 2, imm=-1),
            _insn(_ATOMIC_DW, 8, 2, 0, _CMPXCHG),  # if word == r0: word = r2; r0 = the word it saw
            (_JEQ_X, 0, 3, 0, "out"),  # swapped: given back
        ]
    return _assemble(
        [
            _insn(_MOV64_X, 6, 1),
            _ld_map(1, marks),
            _insn(_MOV64_X, 2, 6),
            _insn(_MOV64_K, 3, imm=0),
            _insn(_MOV64_K, 4, imm=0),  # look up only: an unmarked socket has nothing to give back
            _insn(_CALL, imm=_HELPER_SK_STORAGE_GET),
            (_JEQ_K, 0, 0, 0, "out"),
            _insn(_LDX_W, 1, 0, 0),  # w1 = generation << 16 | slot + 1
            (_JEQ_K, 1, 0, 0, "out"),
            _insn(_ST_W, 0, 0, 0, 0),  # unmark: given back once
            _insn(_MOV64_X, 7, 1),
            _insn(_RSH64_K, 7, imm=16),  # r7 = the generation it was counted in
            _insn(_AND64_K, 1, imm=0xFFFF),
            _insn(_ADD64_K, 1, imm=-1),
            _insn(_STX_W, 10, 1, -4),
            _ld_map(1, counts),
            _insn(_MOV64_X, 2, 10),
            _insn(_ADD64_K, 2, imm=-4),
            _insn(_CALL, imm=_HELPER_MAP_LOOKUP),
            (_JEQ_K, 0, 0, 0, "out"),
            _insn(_MOV64_X, 8, 0),  # r8 = &word
            *give_back,
            "out",
            _insn(_MOV64_K, 0, imm=1),
            _insn(_EXIT),
        ]
    )


def _int_btf() -> int:
    """A BTF object with one type, ``int`` (id 1): socket storage maps must name their key and value types."""
    types = struct.pack("<III", 1, 1 << 24, 4) + struct.pack("<I", (1 << 24) | 32)  # INT "int", signed, 32 bits
    strings = b"\0int\0"
    blob = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings)) + types + strings
    data = ctypes.create_string_buffer(blob, len(blob))
    attr = bytearray(32)
    struct.pack_into("<QQI", attr, 0, ctypes.addressof(data), 0, len(blob))
    return _bpf(_BTF_LOAD, attr)


def _map(kind: int, key: int, value: int, entries: int, flags: int = 0, btf: int = 0) -> int:
    attr = bytearray(72)
    struct.pack_into("<IIIII", attr, 0, kind, key, value, entries, flags)
    if btf:
        struct.pack_into("<III", attr, 48, btf, 1, 1)  # btf_fd, key type id, value type id
    return _bpf(_MAP_CREATE, attr)


def _load(program: bytes, attach_type: int) -> int:
    code = ctypes.create_string_buffer(program, len(program))
    license_ = ctypes.create_string_buffer(b"GPL")  # set_retval and socket storage are GPL-only helpers
    log = ctypes.create_string_buffer(1 << 14)
    attr = bytearray(128)
    struct.pack_into(
        "<IIQQIIQ", attr, 0, _PROG_TYPE_CGROUP_SOCK, len(program) // 8, ctypes.addressof(code),
        ctypes.addressof(license_), 1, len(log), ctypes.addressof(log),
    )  # fmt: skip
    struct.pack_into("<I", attr, 68, attach_type)  # expected_attach_type
    try:
        return _bpf(_PROG_LOAD, attr)
    except OSError as exc:
        verdict = log.value.decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise OSError(exc.errno, f"{exc.strerror} (verifier: {verdict[0]})") from None


def _u64(value: int) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(struct.pack("<Q", value), 8)


def _elem(cmd: int, map_fd: int, key: int, value: ctypes.Array[ctypes.c_char]) -> None:
    k = ctypes.c_uint32(key)
    attr = bytearray(32)
    struct.pack_into("<IIQQQ", attr, 0, map_fd, 0, ctypes.addressof(k), ctypes.addressof(value), 0)
    _bpf(cmd, attr)


class SocketBound:
    """The maps and programs of one server; ``attach`` puts them on the cgroup v2 directory of its runs.

    Raises ``OSError`` where they cannot be loaded (errnos in ``UNAVAILABLE``: the machine lacks them).

    A place can be lost: on this project's machines (Linux 6.18) a box whose processes race to make and close
    sockets and exit with hundreds open now and then ends with its count one or two above what it holds (about
    once in a hundred runs of six such processes; measured with no bound reached, so not the refusal path).
    The release program did not give the place back, and the kernel gives no sign of why. A lost place
    makes the box's own bound tighter, never looser, and the next box in the slot starts from zero
    (``set_bound(fresh=True)``), so it never outlives the box.
    """

    def __init__(self, uid_base: int, slots: int) -> None:
        self._fds: list[int] = []
        self._set: dict[int, int] = {}  # the bound each slot has in the map
        self._generation: dict[int, int] = {}  # each slot's generation (this object is the maps' only writer)
        self.slots = slots
        try:
            btf = self._keep(_int_btf())
            self._marks = self._keep(_map(_MAP_TYPE_SK_STORAGE, 4, 4, 0, _F_NO_PREALLOC, btf))
            self._counts = self._keep(_map(_MAP_TYPE_ARRAY, 4, 8, slots))
            self._bounds = self._keep(_map(_MAP_TYPE_ARRAY, 4, 8, slots))
            self._create = self._keep(
                _load(_create_program(self._counts, self._bounds, self._marks, uid_base, slots), _INET_SOCK_CREATE)
            )
            self._release = self._keep(_load(_release_program(self._counts, self._marks), _INET_SOCK_RELEASE))
        except BaseException:
            self.close()
            raise

    def _keep(self, fd: int) -> int:
        os.set_inheritable(fd, False)
        self._fds.append(fd)
        return fd

    def attach(self, cgroup_dir: str) -> None:
        """Count the sockets made in ``cgroup_dir`` and below, for as long as this object is open."""
        dir_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for program, attach_type in ((self._create, _INET_SOCK_CREATE), (self._release, _INET_SOCK_RELEASE)):
                attr = bytearray(32)
                struct.pack_into("<IIII", attr, 0, program, dir_fd, attach_type, 0)
                self._keep(_bpf(_LINK_CREATE, attr))
        finally:
            os.close(dir_fd)

    def set_bound(self, slot: int, count: int, *, fresh: bool) -> None:
        """The most inet sockets the box in ``slot`` may hold from now on.

        ``fresh``: the slot's last holder is gone (a box opening, a warm entry handed its first run): its count
        starts again from zero, in a new generation that earlier holders' late releases do not touch.
        """
        if fresh:
            self._generation[slot] = generation = (self._generation.get(slot, 0) + 1) & 0xFFFF
            _elem(_MAP_UPDATE_ELEM, self._counts, slot, _u64(generation << GEN_SHIFT))
        if self._set.get(slot) == count:
            return  # the slot's last box had the same bound: no system call for it on the box's way in
        _elem(_MAP_UPDATE_ELEM, self._bounds, slot, _u64(count))
        self._set[slot] = count

    def held(self, slot: int) -> int:
        """How many counted sockets the box in ``slot`` holds now."""
        value = ctypes.create_string_buffer(8)
        _elem(_MAP_LOOKUP_ELEM, self._counts, slot, value)
        word: int = struct.unpack("<Q", value.raw)[0]
        return word & COUNT_MASK

    def close(self) -> None:
        """Detach (closing the links) and free the maps and programs."""
        for fd in reversed(self._fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []


def for_server(root: bool, uid_base: int, slots: int, socket_dir: Callable[[], str]) -> tuple[SocketBound | None, str]:
    """The per-box socket bound of a server (root, cgroup2, BPF), attached to ``socket_dir()``; or None and why not.

    Raises ``OSError`` when the machine has what the bound needs but setting it up failed.
    """
    if not root:
        return None, "the launcher is not root (loading BPF programs needs it)"
    try:
        with open("/proc/self/uid_map") as fh:
            initial = fh.read().split() == ["0", "0", "4294967295"]
    except OSError:
        initial = False
    if not initial:
        # BPF sees uids as the initial user namespace does: not the boxes' uids as we name them.
        return None, "the launcher runs in a user namespace"
    bound: SocketBound | None = None
    try:
        bound = SocketBound(uid_base, slots)
        bound.attach(socket_dir())
    except OSError as exc:
        if bound is not None:
            bound.close()
        if exc.errno not in UNAVAILABLE:
            raise OSError(exc.errno, f"socket bound setup failed: {exc.strerror}") from None
        return None, f"no cgroup2 or BPF here: {exc.strerror}"
    return bound, ""
