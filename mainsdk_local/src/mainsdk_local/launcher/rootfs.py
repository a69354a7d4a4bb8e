"""Root templates: the read-only trees a run pivots into, one per interpreter layout, built once and reused.

A template holds read-only /usr (and /bin, /lib ... as the host links them), a
curated /etc with a generated passwd, group and hosts, a few device nodes, the
interpreter's installation with its site-packages hidden, and empty mount
points for /proc, /work, /out and /tmp, which each run fills in its own namespace.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import signal
import time

from . import common, linux, node_proxy

TEMPLATE_CACHE = 8
# (readonly_paths, hidden_paths, overlays): which root template an exec uses.
TemplateKey = tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, str], ...]]

# /etc entries copied into every root; everything else of the host's /etc stays out.
ETC_ENTRIES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "alternatives",
    "fonts",  # fontconfig's config: without it fc-list (which matplotlib runs) prints "Cannot load default config"
)
# Host folders outside /usr bound read-only when they exist: fontconfig's font caches, so fc-list finds the fonts
# without writing a cache (the box has none to write: "No writable cache directories").
HOST_READONLY = ("/var/cache/fontconfig",)
# The host's own font cache may be stale for the fonts it has (a font added after it was built, or caches
# that only another user could refresh): fontconfig in the box then tries to write one and prints "No
# writable cache directories" on every run. So the launcher builds the boxes' font cache itself, once per
# server, and binds that in place of the host's (``build_font_cache``).
FONT_CACHE = "/var/cache/fontconfig"
FC_CACHE = ("/usr/bin/fc-cache", "/bin/fc-cache")
FONT_CACHE_TIMEOUT = 60.0  # seconds; a few fonts take 20 ms, a desktop's thousands a few seconds
ETC_HIDDEN = ("ssl/private",)
DEVICES = ("null", "zero", "full", "random", "urandom")

PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    # Its home is HOME's (``common.box_environment``): a folder of the box's own /tmp.
    f"sandbox:x:{common.INSIDE_ID}:{common.INSIDE_ID}:sandbox:/tmp/{common.HOME_IN_TMP}:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\nsandbox:x:{common.INSIDE_ID}:\nnogroup:x:65534:\n"
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"


def _mkdirs(root: str, path: str) -> str:
    """Create ``path`` (absolute, inside the sandbox) under ``root`` with mode 0755 dirs."""
    current = root
    for part in path.strip("/").split("/"):
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise OSError(errno.ELOOP, f"{current} is a symlink in the new root")
        if not os.path.isdir(current):
            os.mkdir(current, 0o755)
    return current


def _mount_point_for(source: str, target: str) -> None:
    """Make an empty directory or file at ``target`` to bind ``source`` over."""
    if os.path.isdir(source):
        if not os.path.isdir(target):
            os.mkdir(target, 0o755)
    elif not os.path.exists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))


def write_node_preload(path: str) -> None:
    """Write the Node proxy preload at ``path`` (readable by everyone), making its directory."""
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    with open(path, "w") as fh:
        fh.write(node_proxy.SOURCE)
    os.chmod(path, 0o644)


def build_font_cache(base: str) -> str | None:
    """Build the boxes' fontconfig cache in ``<base>/fontconfig``; its path, or None to bind the host's.

    ``fc-cache -s`` runs in a mount namespace of its own where that folder is bound over the host's
    ``/var/cache/fontconfig``, with no HOME and no environment but PATH, from that folder: it sees the
    system's fonts and configuration exactly as a box does, writes every cache there, and never touches the
    host's cache. It reads only the system's fonts and ``/etc/fonts``, nothing a box can write.
    """
    fc_cache = next((path for path in FC_CACHE if os.access(path, os.X_OK)), None)
    if fc_cache is None or not os.path.isdir(FONT_CACHE) or os.path.islink(FONT_CACHE):
        return None  # no fontconfig on this host: nothing in the box runs it either
    target = os.path.join(base, "fontconfig")
    os.mkdir(target, 0o755)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or exits at once
        try:
            linux.unshare(linux.CLONE_NEWNS)
            linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
            linux.mount(target, FONT_CACHE, None, linux.MS_BIND)
            os.chdir(target)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.execve(fc_cache, [fc_cache, "-s"], {"PATH": "/usr/bin:/bin"})
        finally:
            os._exit(127)
    status = _wait(pid, FONT_CACHE_TIMEOUT)
    if status == 0 and any(name.endswith(tuple(f".cache-{n}" for n in range(3, 20))) for name in os.listdir(target)):
        return target
    # fc-cache failed (or wrote nothing): the boxes see the host's cache as before, warnings and all.
    for name in os.listdir(target):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(target, name))
    with contextlib.suppress(OSError):
        os.rmdir(target)
    return None


def _wait(pid: int, timeout: float) -> int | None:
    """``pid``'s exit status, killing it past ``timeout`` seconds (None then, or when it died of a signal)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


def within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or under it."""
    return root in ("/", path) or path.startswith(root + "/")


class Templates:
    """Read-only root trees, one per (readonly_paths, hidden_paths, overlays), built once and reused.

    Each run's mount namespace starts as a copy of the server's, so it already
    holds the template; the run only adds /proc, /work, /out and /tmp on top (in its own
    namespace) and pivots into it. That keeps per-run mount work to a handful of
    calls. The template mount is read-only and owned by the initial user
    namespace, so code in the run cannot remount it.
    """

    def __init__(self, base: str) -> None:
        self.base = base
        self._cache: collections.OrderedDict[TemplateKey, str] = collections.OrderedDict()
        self._count = 0
        self.empty_dir = os.path.join(base, "empty-dir")
        self.empty_file = os.path.join(base, "empty-file")
        self.font_cache: str | None = None  # the boxes' own fontconfig cache, bound over FONT_CACHE

    def setup(self) -> None:
        os.mkdir(self.empty_dir, 0o555)
        os.close(os.open(self.empty_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))
        self.font_cache = build_font_cache(self.base)

    def get(
        self, readonly: tuple[str, ...], hidden: tuple[str, ...], overlays: tuple[tuple[str, str], ...] = ()
    ) -> str:
        key = (readonly, hidden, overlays)
        path = self._cache.get(key)
        if path is not None:
            self._cache.move_to_end(key)
            return path
        for ro in readonly:  # checked once per template, not per exec
            if os.path.realpath(ro) != ro:
                raise common.RequestError("value", f"readonly path {ro} must be canonical (no symlinks)")
            if not os.path.exists(ro):
                raise common.RequestError("value", f"readonly path {ro} does not exist")
        self._count += 1
        path = os.path.join(self.base, f"root-{self._count}")
        os.mkdir(path, 0o755)
        try:
            self._build(path, readonly, hidden, overlays)
        except OSError as exc:
            self._drop(path)
            raise common.launch_error("root", exc) from None
        self._cache[key] = path
        while len(self._cache) > TEMPLATE_CACHE:
            _, old = self._cache.popitem(last=False)
            self._drop(old)  # runs using it keep their own copy of the mount
        return path

    @staticmethod
    def _drop(path: str) -> None:
        with contextlib.suppress(OSError):
            linux.umount(path)
        with contextlib.suppress(OSError):
            os.rmdir(path)

    def _build(
        self, root: str, readonly: tuple[str, ...], hidden: tuple[str, ...], overlays: tuple[tuple[str, str], ...]
    ) -> None:
        linux.mount("tmpfs", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755")
        for name in ("usr", "etc", "proc", "dev", *common.BOX_FOLDERS):
            os.mkdir(os.path.join(root, name), 0o755)
        linux.bind_readonly("/usr", os.path.join(root, "usr"))
        # /bin, /lib, ... as the host has them: symlinks into /usr on merged-/usr systems.
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + name
            if os.path.islink(host):
                os.symlink(os.readlink(host), os.path.join(root, name))
            elif os.path.isdir(host):
                os.mkdir(os.path.join(root, name), 0o755)
                linux.bind_readonly(host, os.path.join(root, name))
        etc = os.path.join(root, "etc")
        for name in ETC_ENTRIES:
            host = os.path.join("/etc", name)
            target = os.path.join(etc, name)
            if os.path.islink(host):
                os.symlink(os.readlink(host), target)
            elif os.path.isdir(host) or os.path.isfile(host):
                _mount_point_for(host, target)
                linux.bind_readonly(host, target)
        for host in HOST_READONLY:
            if os.path.isdir(host) and not os.path.islink(host):
                source = self.font_cache if host == FONT_CACHE and self.font_cache else host
                linux.bind_readonly(source, _mkdirs(root, host))
        for name, text in (("passwd", PASSWD), ("group", GROUP), ("hosts", HOSTS), ("hostname", "sandbox\n")):
            with open(os.path.join(etc, name), "w") as fh:
                fh.write(text)
        write_node_preload(root + node_proxy.IN_ROOT)
        for name in ETC_HIDDEN:
            target = os.path.join(etc, name)
            if os.path.isdir(target) and not os.path.islink(target):
                linux.bind_readonly(self.empty_dir, target, recursive=False)
        dev = os.path.join(root, "dev")
        for name in DEVICES:
            host = os.path.join("/dev", name)
            if os.path.exists(host):
                _mount_point_for(host, os.path.join(dev, name))
                # Not read-only: writing /dev/null must work. Device nodes come from the
                # host's /dev mount, which is not nodev.
                linux.mount(host, os.path.join(dev, name), None, linux.MS_BIND)
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            os.symlink(target, os.path.join(dev, name))
        bound = ["/usr"]
        for path in sorted(readonly):
            if any(within(path, b) for b in bound):
                continue  # already visible through a bound parent
            target = _mkdirs(root, os.path.dirname(path)) if os.path.dirname(path) != "/" else root
            target = os.path.join(target, os.path.basename(path))
            _mount_point_for(path, target)
            linux.bind_readonly(path, target)
            bound.append(path)
        over = {target: source for source, target in overlays}
        for path in hidden:
            real = os.path.realpath(path)
            if not os.path.lexists(real):
                continue
            if not any(within(real, b) for b in bound):
                raise OSError(errno.EINVAL, f"hidden path {path} is not inside /usr or a readonly path")
            target = root + real
            source = self.empty_dir if os.path.isdir(real) else self.empty_file
            if path in over and os.path.isdir(real):
                # A package env, read-only, where site already looks: no interpreter flag changes.
                linux.bind_readonly(over[path], target, recursive=False)
                continue
            linux.bind_readonly(source, target, recursive=False)
        for site in common.KERNEL_SITES:
            if site not in over:
                continue
            # The cell kernel's packages, read-only at a path of their own (never a site-packages folder).
            if any(within(site, b) or within(b, site) for b in bound if b != "/usr"):
                raise OSError(errno.EINVAL, f"{site} is inside a readonly path")
            linux.bind_readonly(over[site], _mkdirs(root, site), recursive=False)
        linux.mount(
            None, root, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV
        )

    def shutdown(self) -> None:
        for path in self._cache.values():
            self._drop(path)
        self._cache.clear()
