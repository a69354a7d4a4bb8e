"""Code cannot read or write the app's files: only its work and out folders, and what comes back out is safe.

Real code in the real sandbox, through the public API, reads the app's files, home, /root, /etc/shadow and
/proc; writes everywhere outside /work and /out; and leaves links, fifos, devices and odd names in its out
folder. Each escape attempt (``cold_and_warm``) runs twice: cold, and on warm pool entries (conftest.py).
"""

from __future__ import annotations

import ast
import errno
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from escape_probes import SECRET, launcher_server_pids
from mainsdk import Sandbox, SandboxError
from mainsdk.errors import INVALID_OPTION
from mainsdk_local.launcher import linux
from requires import NAMESPACES


def probe_paths(sandbox: Sandbox, paths: list[str], **options: Any) -> dict[str, str]:
    """Run code that tries to read each path; return {path: "READ <start>" or the error's name}."""
    code = (
        "import json, os, sys\nout = {}\n"
        "for p in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        read = repr(os.listdir(p)) if os.path.isdir(p) else open(p, 'rb').read(200).decode('latin-1')\n"
        "        out[p] = 'READ ' + read\n"
        "    except OSError as exc:\n"
        "        out[p] = type(exc).__name__\n"
        "print(json.dumps(out))"
    )
    result = sandbox.run(f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(paths))}]\n{code}", **options)
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.fixture
def host_secret_file(tmp_path: Path) -> Iterator[Path]:
    """A file of the app's holding SECRET, world-readable, outside any box."""
    path = tmp_path / "app-secret.txt"
    path.write_text(SECRET)
    path.chmod(0o644)
    yield path


@pytest.fixture
def home_secret_file() -> Iterator[Path]:
    """A file holding SECRET in the app's home (/root here)."""
    path = Path.home() / f".mainsdk-escape-{secrets.token_hex(4)}"
    path.write_text(SECRET)
    yield path
    path.unlink()


@pytest.fixture
def writable_mount_under_usr() -> Iterator[str]:
    """A writable, suid, dev tmpfs mounted on the host under /usr/share (root only), unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs under /usr needs root")

    path = f"/usr/share/mainsdk-rw-{secrets.token_hex(4)}"
    os.mkdir(path)
    try:
        linux.mount("tmpfs", path, "tmpfs", 0, "size=1m,mode=1777")
        try:
            yield path
        finally:
            linux.umount(path)
    finally:
        os.rmdir(path)


REMOUNT_FALLBACK = """
import errno, json, os, tempfile
from mainsdk_local.launcher import linux
linux.unshare(linux.CLONE_NEWNS)
linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
base = tempfile.mkdtemp()
src, dst = os.path.join(base, "src"), os.path.join(base, "dst")
os.mkdir(src); os.mkdir(dst)
linux.mount("tmpfs", src, "tmpfs", 0, "size=1m")
os.mkdir(os.path.join(src, "sub"))
linux.mount("tmpfs", os.path.join(src, "sub"), "tmpfs", linux.MS_NOEXEC, "size=1m")  # a writable submount


def no_mount_setattr(target, attr_set, *, recursive):  # a kernel before 5.12
    raise OSError(errno.ENOSYS, "mount_setattr: Function not implemented")


linux.mount_setattr = no_mount_setattr
linux.bind_readonly(src, dst)
out = {}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4].startswith(dst):
        out[fields[4][len(dst):] or "/"] = sorted(set(fields[5].split(",")) & {"ro", "rw", "nosuid", "nodev", "noexec"})
try:
    open(os.path.join(dst, "sub", "x"), "w")
except OSError as exc:
    out["write"] = errno.errorcode[exc.errno]
print(json.dumps(out))
"""


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_the_apps_files_home_root_shadow_and_environ_cannot_be_read(
    sandbox: Sandbox, host_secret_file: Path, home_secret_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Must hold: nothing of the app's filesystem or environment can be read: its files, its home, /root,
    # /etc/shadow, /proc/1/environ (the box's init), the app's and the launcher's /proc/<pid>/environ.
    monkeypatch.setenv("APP_ONLY_SECRET", SECRET)
    sandbox.run("print(1)")  # the launcher server is up
    app = os.getpid()
    paths = [
        str(host_secret_file),
        str(host_secret_file.parent),
        str(home_secret_file),
        "/etc/shadow",
        "/proc/1/environ",
        "/proc/1/mem",
        f"/proc/{app}/environ",
        f"/proc/{app}/cmdline",
        *(f"/proc/{server}/environ" for server in launcher_server_pids()),
        "/proc/self/../1/environ",
        "/root/.bash_history",
        "/home",
    ]
    seen = probe_paths(sandbox, paths)
    assert SECRET not in json.dumps(seen)
    assert {p: v for p, v in seen.items() if v.startswith("READ")} == {}, seen
    # /root holds at most the path down to an interpreter installed there (pyenv), nothing else of the home.
    listing = ast.literal_eval(
        sandbox.run("import os; print(os.listdir('/root') if os.path.isdir('/root') else [])").stdout
    )
    assert set(listing) <= {".pyenv"}
    assert SECRET not in sandbox.run("import os; print(dict(os.environ))").stdout


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_nothing_outside_work_out_and_tmp_can_be_written(sandbox: Sandbox, tmp_path: Path) -> None:
    # Must hold: the only writable places are /work, /out and /tmp, all on the box's own tmpfs (and /dev/null-like
    # nodes); the app's folders, the root, /usr, /etc, /var/tmp, /proc/sys and /sys are not, and nothing appears
    # on the host (its /tmp included).
    host_dir = tmp_path / "host-dir"
    host_dir.mkdir(mode=0o777)
    targets = ["/", "/usr", "/usr/lib", "/etc", "/etc/fonts", "/var/cache/fontconfig", "/var/tmp", "/root"]
    targets += ["/dev", "/dev/shm", "/run", str(host_dir)]
    code = (
        "import json, os, sys\nout = {}\n"
        "for d in json.loads(sys.argv[1]) + ['/work', '/out', '/tmp']:\n"
        "    try:\n"
        "        open(os.path.join(d, 'escape.txt'), 'w').write('x'); out[d] = 'written'\n"
        "    except OSError as exc:\n        out[d] = type(exc).__name__\n"
        "for knob in ['/proc/sys/kernel/hostname', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger',"
        " '/sys/kernel/uevent_helper', '/proc/self/oom_score_adj']:\n"
        "    try:\n        open(knob, 'w').write('1'); out[knob] = 'written'\n"
        "    except OSError as exc:\n        out[knob] = type(exc).__name__\n"
        "print(json.dumps(out))"
    )
    result = sandbox.run(f"import sys; sys.argv[1:] = [{json.dumps(json.dumps(targets))}]\n{code}")
    out = json.loads(result.stdout)
    assert out.pop("/work") == "written" and out.pop("/out") == "written" and out.pop("/tmp") == "written"
    # Raising its own OOM score is allowed (it only makes the code the first victim); lowering is not.
    out.pop("/proc/self/oom_score_adj")
    assert {k: v for k, v in out.items() if v == "written"} == {}, out
    assert list(host_dir.iterdir()) == []
    assert not Path("/escape.txt").exists() and not Path("/tmp/escape.txt").exists()


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_a_writable_mount_under_a_read_only_tree_is_read_only_nosuid_nodev_in_the_box(
    make_sandbox: Callable[..., Any], writable_mount_under_usr: str
) -> None:
    # Must hold: every mount the box sees under a read-only tree (/usr, /etc entries, an interpreter's
    # prefix) is read-only, nosuid and nodev, not only the top one: a writable mount under /usr on the host
    # (here a tmpfs the test mounts before the launcher starts) cannot be written from the box and
    # carries no suid or device rights there.
    path = writable_mount_under_usr
    sandbox = make_sandbox().sandbox  # a new driver: its launcher starts now and copies the host's mounts
    code = (
        "import errno, os, sys\npath = sys.argv[1]\n"
        "try:\n    open(os.path.join(path, 'x'), 'w').write('escaped'); print('written')\n"
        "except OSError as exc:\n    print(errno.errorcode[exc.errno])\n"
        "for line in open('/proc/self/mountinfo'):\n"
        "    fields = line.split()\n"
        "    if fields[4] == path:\n"
        "        print(sorted(set(fields[5].split(',')) & {'ro', 'rw', 'nosuid', 'nodev'}))\n"
    )
    result = sandbox.run(f"import sys; sys.argv[1:] = [{path!r}]\n{code}")
    assert result.stdout.splitlines() == ["EROFS", "['nodev', 'nosuid', 'ro']"], result.stderr
    assert not os.path.exists(os.path.join(path, "x"))


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
@pytest.mark.skipif(os.geteuid() != 0, reason="mounting in a private mount namespace needs root")
def test_without_mount_setattr_every_submount_is_remounted_read_only() -> None:
    # Must hold on kernels without mount_setattr (before 5.12) too: the fallback remounts each submount of a
    # read-only bind read-only, nosuid and nodev, keeping the flags it had (noexec here).
    done = subprocess.run(
        [sys.executable, "-c", REMOUNT_FALLBACK], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "/": ["nodev", "nosuid", "ro"],
        "/sub": ["nodev", "noexec", "nosuid", "ro"],
        "write": "EROFS",
    }


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_links_in_out_never_carry_a_host_files_content(
    make_sandbox: Callable[..., Any], host_secret_file: Path
) -> None:
    # Must hold: what comes back as FileRefs is only regular files the code wrote; a symlink or a hard
    # link in /out pointing at a host file (or anything outside) is skipped, never followed.
    sandbox = make_sandbox().sandbox
    code = f"""
import os
os.symlink({str(host_secret_file)!r}, '../out/app-secret')
os.symlink('/etc/passwd', '../out/passwd')
os.symlink('/proc/self/environ', '../out/environ')
os.symlink('/etc', '../out/etc-dir')
os.symlink('../work', '../out/work-dir')
sources = [('/etc/passwd', 'hard-passwd'), ('/usr/bin/env', 'hard-env'), ({str(host_secret_file)!r}, 'hard-app')]
for source, name in sources:
    try:
        os.link(source, '../out/' + name); print(name, 'linked')
    except OSError as exc:
        print(name, exc.errno)
open('../out/ok.txt', 'w').write('mine')
"""
    result = sandbox.run(code)
    assert result.exit_code == 0, result.stderr
    # Hard links cannot cross into the box's own filesystem (EXDEV), or to a missing file (ENOENT).
    assert all(line.split()[1] in (str(errno.EXDEV), str(errno.ENOENT)) for line in result.stdout.splitlines())
    assert [(f.name, sandbox.files.read(f)) for f in result.files] == [("ok.txt", b"mine")]
    # Through a session the same holds for reading a link and writing through a planted directory link.
    with sandbox.create() as session:
        session.run(
            "python3",
            ["-c", f"import os; os.symlink({str(host_secret_file)!r}, '../out/s'); os.symlink('/etc', 'etc')"],
        )
        for path in ("../out/s", "etc/passwd"):
            with pytest.raises(SandboxError) as caught:
                session.read(path)
            assert SECRET not in str(caught.value)
        with pytest.raises(SandboxError):
            session.write("etc/planted", "x")
    assert host_secret_file.read_text() == SECRET and not Path("/etc/planted").exists()


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_fifos_sockets_and_devices_in_out_are_skipped_without_hanging(make_sandbox: Callable[..., Any]) -> None:
    # Must hold: a FIFO (which would block a reader), a socket node or a device in /out never blocks the
    # collection and never comes back; the code cannot make device nodes at all.
    sandbox = make_sandbox().sandbox
    code = """
import os, stat
os.mkfifo('../out/fifo')
os.mknod('../out/sock', stat.S_IFSOCK)
for name, dev in [('null', os.makedev(1, 3)), ('sda', os.makedev(8, 0))]:
    try:
        os.mknod('../out/' + name, stat.S_IFCHR | 0o666, dev); print(name, 'made')
    except OSError as exc:
        print(name, exc.errno)
open('../out/ok.txt', 'w').write('ok')
"""
    started = time.monotonic()
    result = sandbox.run(code)
    assert result.stdout == f"null {errno.EPERM}\nsda {errno.EPERM}\n", result.stderr
    assert [f.name for f in result.files] == ["ok.txt"]
    assert time.monotonic() - started < 5
    with sandbox.create() as session:
        session.run("python3", ["-c", "import os; os.mkfifo('../out/fifo'); os.mkfifo('w')"])
        for path in ("../out/fifo", "w"):
            started = time.monotonic()
            with pytest.raises(SandboxError):
                session.read(path)
            assert time.monotonic() - started < 2


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
@pytest.mark.parametrize("name", ["../escape.txt", "/etc/escape.txt", "a/../../escape.txt", "nul\0name", "", "a//b"])
def test_file_names_with_dot_dot_nul_or_absolute_paths_are_refused(
    make_sandbox: Callable[..., Any], name: str, tmp_path: Path
) -> None:
    # Must hold: a file passed in with a path outside the work folder is refused before anything runs, for a
    # run and for a session's write alike; nothing is written anywhere.
    built = make_sandbox()
    with pytest.raises(SandboxError) as caught:
        built.sandbox.run("print(1)", files={name: "x"})
    assert caught.value.code == INVALID_OPTION
    assert [(e.kind, e.error) for e in built.events] == [("refused", INVALID_OPTION)]
    with built.sandbox.create() as session:
        with pytest.raises(SandboxError) as caught:
            session.write(name, "x")
        assert caught.value.code == INVALID_OPTION
    assert not Path("/escape.txt").exists() and not Path("/etc/escape.txt").exists()


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_names_the_code_gives_its_out_files_come_back_relative(make_sandbox: Callable[..., Any]) -> None:
    # Must hold: whatever the code names its files, a FileRef's name is relative to /out with no '..' segment
    # and no leading '/'; names that are not UTF-8 are skipped.
    sandbox = make_sandbox().sandbox
    code = (
        "import os\n"
        "os.makedirs('../out/a/b')\n"
        "for name in ['...', '..x', 'a/b/..y', 'line\\nbreak', ' space', '-dash']:\n"
        "    open('../out/' + name, 'w').write(name)\n"
        "open(b'../out/\\xff\\xfe', 'w').write('bytes')\n"
    )
    result = sandbox.run(code)
    names = sorted(f.name for f in result.files)
    assert names == sorted(["...", "..x", "a/b/..y", "line\nbreak", " space", "-dash"])
    for name in names:
        assert not name.startswith("/") and ".." not in name.split("/")


@pytest.fixture
def host_marker() -> Iterator[Path]:
    """A file with a secret in the app's home (/root here) that no run may read."""
    path = Path.home() / f".mainsdk-test-{secrets.token_hex(4)}"
    path.write_text("host-secret-content")
    yield path
    path.unlink()


def test_the_code_cannot_read_the_apps_home_or_root(sandbox: Sandbox, host_marker: Path, tmp_path: Path) -> None:
    app_file = tmp_path / "app-data.txt"
    app_file.write_text("host-secret-content")
    paths = [str(host_marker), "/etc/shadow", str(app_file), str(tmp_path)]
    code = (
        f"import os\nfor p in {paths!r}:\n"
        "    try:\n        print(p, 'READ', open(p).read() if os.path.isfile(p) else os.listdir(p))\n"
        "    except OSError as e:\n        print(p, type(e).__name__)\n"
    )
    out = sandbox.run(code).stdout
    assert "READ" not in out and "host-secret-content" not in out
    assert f"{host_marker} FileNotFoundError" in out
    # /root holds at most the path down to an interpreter installed there (pyenv), nothing else of the home.
    listing = ast.literal_eval(
        sandbox.run("import os; print(os.listdir('/root') if os.path.exists('/root') else [])").stdout
    )
    assert set(listing) <= {".pyenv"}


def test_the_work_folder_holds_only_the_passed_files_and_out_is_empty(sandbox: Sandbox) -> None:
    code = "import os; print(os.getcwd(), sorted(os.listdir('.')), os.listdir('../out'))"
    assert sandbox.run(code, files={"data.csv": "a\nb\n"}).stdout == "/work ['data.csv'] []\n"


def test_files_written_to_out_come_back_as_file_refs(sandbox: Sandbox) -> None:
    result = sandbox.run(
        "rows = open('data.csv').read().splitlines()\nopen('../out/count.txt', 'w').write(str(len(rows)))",
        files={"data.csv": "a\nb\nc\n"},
        feature="chart",
    )
    assert [(f.name, f.size) for f in result.files] == [("count.txt", 1)]
    assert sandbox.files.read(result.files[0]) == b"3"


def test_only_the_work_out_and_tmp_folders_are_writable(sandbox: Sandbox) -> None:
    code = (
        "import os\n"
        "for p in ['/x', '/usr/x', '/etc/x', '/tmp/x', '/proc/x', '/work/x', '/out/x']:\n"
        "    try:\n        open(p, 'w').write('1'); print(p, 'ok')\n"
        "    except OSError as e:\n        print(p, 'no')\n"
    )
    result = sandbox.run(code)
    ok = [line for line in result.stdout.split("\n") if line.endswith("ok")]
    # Weak mode: /tmp is the host's (the box's own temp folder is TMPDIR, in its private directory).
    assert ok == (["/tmp/x ok"] if result.isolation == "namespace" else []) + ["/work/x ok", "/out/x ok"]


TMP_PROBE = """\
import json, os, sys, tempfile
name, marker = sys.argv[1:3]
with open('/tmp/' + name, 'w') as fh:
    fh.write('kept')
mounts = [line.split()[5] for line in open('/proc/self/mountinfo') if line.split()[4] == '/tmp']
print(json.dumps({
    'read': open('/tmp/' + name).read(),
    'same_disk_as_work': os.stat('/tmp').st_dev == os.stat('/work').st_dev,
    'mounts': mounts,
    'host_marker_seen': os.path.exists(marker),
    'gettempdir': tempfile.gettempdir(),
    'listing': sorted(os.listdir('/tmp')),
}))
"""


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_tmp_is_writable_on_the_boxs_own_disk_and_never_the_hosts(sandbox: Sandbox) -> None:
    # Must hold: /tmp in a box is writable and lives on the box's own tmpfs, the one /work is on (so it counts
    # against the disk limit and goes with the box), mounted rw, nosuid and nodev; it is not the host's /tmp: a
    # file made there on the host is not in the box, and what the code writes there never reaches the host.
    marker = Path("/tmp") / f"mainsdk-host-{secrets.token_hex(4)}"
    marker.write_text(SECRET)
    marker.chmod(0o644)
    name = f"box-{secrets.token_hex(4)}"
    try:
        result = sandbox.run(f"import sys; sys.argv[1:] = {[name, str(marker)]!r}\n{TMP_PROBE}")
    finally:
        marker.unlink()
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["read"] == "kept" and seen["same_disk_as_work"] is True, seen
    # A warm entry's /tmp also shows its empty pool folder beneath the run's (as /work and /out do).
    assert seen["mounts"] and all({"nosuid", "nodev"} <= set(flags.split(",")) for flags in seen["mounts"]), seen
    assert "rw" in seen["mounts"][-1].split(","), seen
    assert seen["host_marker_seen"] is False and seen["gettempdir"] == "/tmp", seen
    assert seen["listing"] == sorted(["home", name]), seen
    assert not (Path("/tmp") / name).exists()
    assert SECRET not in result.stdout


HOME_PROBE = """\
import json, os, pwd
home = os.environ.get('HOME')
for sub in ('.cache/app', '.config/app'):
    os.makedirs(os.path.join(home, sub))
    with open(os.path.join(home, sub, 'x'), 'w') as fh:
        fh.write('ok')
print(json.dumps({
    'HOME': home, 'TMPDIR': os.environ.get('TMPDIR'), 'expanduser': os.path.expanduser('~'),
    'is_dir': os.path.isdir(home), 'owner_is_me': os.stat(home).st_uid == os.getuid(),
    'cache': open(os.path.join(home, '.cache/app/x')).read(), 'pw_dir': pwd.getpwuid(os.getuid()).pw_dir,
}))
"""


@pytest.mark.usefixtures("cold_and_warm")
def test_home_and_tmpdir_are_writable_folders_of_the_box_unless_the_app_names_them(sandbox: Sandbox) -> None:
    # Must hold: HOME is set to a folder of the box's, made for it, the code's own and writable (~/.cache and
    # ~/.config writes work: matplotlib, pip), inside TMPDIR (/tmp in namespace mode; in weak mode a folder of
    # the box's private directory); an app's env that names HOME or TMPDIR wins.
    result = sandbox.run(HOME_PROBE)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    if result.isolation == "namespace":
        assert (seen["HOME"], seen["TMPDIR"], seen["pw_dir"]) == ("/tmp/home", "/tmp", "/tmp/home"), seen
    assert seen["HOME"] == os.path.join(seen["TMPDIR"], "home") and seen["expanduser"] == seen["HOME"], seen
    assert seen["is_dir"] is True and seen["owner_is_me"] is True and seen["cache"] == "ok", seen
    named = sandbox.run(
        "import os; print(os.environ['HOME'], os.environ['TMPDIR'])", env={"HOME": "/work", "TMPDIR": "/out"}
    )
    assert named.stdout == "/work /out\n", named.stderr


LEAVE = """\
import os
for path in ('/tmp/left', os.path.expanduser('~/.cache/left')):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as fh:
        fh.write('secret of an earlier run')
print('left')
"""
LOOK = "import os; print(sorted(os.listdir('/tmp')), sorted(os.listdir(os.environ['HOME'])))"


@NAMESPACES
@pytest.mark.usefixtures("cold_and_warm")
def test_what_a_run_leaves_in_tmp_and_home_is_gone_for_the_next_run_and_kept_in_a_session(sandbox: Sandbox) -> None:
    # Must hold: /tmp and HOME are the box's: a run's files there are gone for the next run (cold, or on a warm
    # pool entry made before either), and a session's later commands find them, as they find /work's.
    assert sandbox.run(LEAVE).stdout == "left\n"
    after = sandbox.run(LOOK)
    assert after.stdout == "['home'] []\n", after.stderr
    with sandbox.create() as session:
        assert session.run("python3", ["-c", LEAVE]).stdout == "left\n"
        again = session.run("python3", ["-c", LOOK])
        assert again.stdout == "['home', 'left'] ['.cache']\n", again.stderr
