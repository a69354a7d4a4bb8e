"""Which isolation a launcher gives: namespaces wherever they work, weak only where they do not or when asked.

A transient failure on the namespace path (a full /tmp, no inodes) must be an error
the app sees, never a silent switch to weak isolation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from as_nobody import readable_copy_of_imports

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/ns/user"), reason="needs Linux namespaces")

# Runs in a child process, then asks the local driver for its capabilities and makes one run.
# "no-inodes": a private mount namespace whose /tmp is a tmpfs with no free inode, so the launcher
# server cannot make its mount base there (/tmp/.mainsdk-local). "no-namespaces": namespaces refused.
APP = """
import json, sys
from mainsdk_local.launcher import linux as L
from mainsdk_local.launcher import seccomp as SC
if sys.argv[1] == "no-inodes":
    import errno, os, sysconfig
    import mainsdk, mainsdk_local, ruamel.yaml
    # This checkout or its venv may itself live under /tmp (a CI clone): keep those folders reachable
    # through binds, then use up every inode the new /tmp has left.
    needed = (sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"], mainsdk.__file__, mainsdk_local.__file__)
    kept = {path.split("/")[2] for path in needed if path.startswith("/tmp/")}
    L.unshare(L.CLONE_NEWNS)
    L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)
    handles = {name: os.open("/tmp/" + name, os.O_PATH | os.O_DIRECTORY) for name in kept}  # this namespace's
    L.mount("tmpfs", "/tmp", "tmpfs", 0, "size=1m,nr_inodes=16,mode=1777")
    for name, handle in handles.items():
        os.mkdir("/tmp/" + name)
        L.mount(f"/proc/self/fd/{handle}", "/tmp/" + name, None, L.MS_BIND | L.MS_REC)
    for filler in range(64):
        try:
            os.mkdir(f"/tmp/.filler-{filler}")
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            break
else:  # as a container runtime's seccomp profile does: unshare, mount and the rest refused with EPERM
    L.prctl(L.PR_SET_NO_NEW_PRIVS, 1)
    SC.FILTER.install()
from mainsdk import Sandbox, SandboxDeps, SandboxError
from mainsdk.config import load_config_text
from mainsdk_local import local_sandbox_driver
config = load_config_text("sandbox: {driver: local}\\n")
driver = local_sandbox_driver(programs={"python": sys.argv[2]})
answer = {}
try:
    answer["capabilities"] = driver.mainsdk_driver_capabilities().isolation
except SandboxError as exc:
    answer["capabilities"] = exc.code
sandbox = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
try:
    result = sandbox.run("print(1)")
    answer.update(isolation=result.isolation, stdout=result.stdout)
except SandboxError as exc:
    answer.update(code=exc.code, message=exc.message)
finally:
    sandbox.close()
print(json.dumps(answer))
"""


def run_app(mode: str, python: str = "python3") -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", APP, mode, python], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return answer


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs on /tmp in a private mount namespace needs root")
def test_a_full_tmp_is_an_error_not_a_switch_to_weak_isolation() -> None:
    # Must hold: when the namespace path fails for a reason that passes (here /tmp has no free inode, a real
    # exhaustion in a private mount namespace), the run fails with a coded, retryable error naming the
    # cause; it never runs with weak isolation the app did not ask for.
    answer = run_app("no-inodes")
    assert answer["capabilities"] == "MAIN-SANDBOX-0006", answer  # not "weak"
    assert "isolation" not in answer, answer
    assert answer["code"] == "MAIN-SANDBOX-0006", answer
    assert "No space left on device" in answer["message"] and "namespace isolation" in answer["message"], answer


def test_a_machine_that_refuses_namespaces_gets_weak_isolation_and_says_so() -> None:
    # Must hold: where namespaces are refused (here by a seccomp filter like a container runtime's default
    # profile, inherited by the launcher), the launcher still runs code, in weak mode, and says "weak".
    if not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs /usr/bin/python3")  # a weak box's uid cannot enter an interpreter under root's home
    answer = run_app("no-namespaces", "/usr/bin/python3")
    assert answer == {"capabilities": "weak", "isolation": "weak", "stdout": "1\n"}, answer


# The app, run as nobody: what the driver declares, what a result says, and eight processes of 24 MiB under a
# 64 MiB limit, each of which a per-process limit lets through.
AS_NOBODY = """
import json, site, sys
site.addsitedir(sys.argv[1])
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_local import local_sandbox_driver
config = load_config_text("sandbox: {driver: local, limits: {memory: 64MB}}\\n")
driver = local_sandbox_driver(programs={"python": "/usr/bin/python3"})
caps = driver.mainsdk_driver_capabilities()
sockets = [driver._launcher.socket_bound, driver._launcher.socket_bound_why]
sandbox = Sandbox(SandboxDeps(config=config, driver=driver, load_entrypoints=False))
tree = sandbox.run(
    "import os, time\\nkids = []\\n"
    "for _ in range(8):\\n    pid = os.fork()\\n"
    "    if pid == 0:\\n        b = bytearray(24 << 20)\\n        time.sleep(1); os._exit(0)\\n"
    "    kids.append(pid)\\n"
    "print(sum(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) == 0 for k in kids))\\n"
)
one = sandbox.run("b = bytearray(300 << 20)\\nprint('survived')")
sandbox.close()
print(json.dumps({"caps": [caps.isolation, caps.memory_limit_scope], "scope": tree.memory_limit_scope,
                  "tree": tree.stdout.strip(), "one": [one.stdout, one.exit_code], "sockets": sockets}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="running the app as another user needs root")
def test_a_non_root_app_is_told_its_memory_limit_is_per_process() -> None:
    # Must hold: an app that is not root has no writable cgroup here (cgroup v1, no delegated v2 subtree), so
    # its memory limit is RLIMIT_AS, which holds per process. The driver must say so (Capabilities and
    # every result: memory_limit_scope "process"; the conformance suite then skips its whole-tree test),
    # rather than promise a limit that eight processes pass together. One process is still held to it.
    purelib = sysconfig.get_paths()["purelib"]
    if not os.path.exists("/usr/bin/python3") or shutil.which("setpriv") is None:
        pytest.skip("needs /usr/bin/python3 and setpriv")
    version = subprocess.run(
        ["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"/usr/bin/python3 is {version}, not this venv's Python: it cannot import the venv's packages")
    readable = readable_copy_of_imports(purelib, "mainsdk", "mainsdk_local")
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         "/usr/bin/python3", "-c", AS_NOBODY, readable],
        capture_output=True, text=True, timeout=120, check=False, cwd="/",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["caps"] == ["namespace", "process"], answer
    assert answer["scope"] == "process", answer
    assert answer["tree"] == "8", answer  # what "per process" means: each of them got its 24 MiB
    assert answer["one"][0] == "" and answer["one"][1] != 0, answer  # RLIMIT_AS: MemoryError
    # No socket count either (loading BPF programs needs root), and the launcher says so and why.
    assert answer["sockets"] == ["none", "the launcher is not root (loading BPF programs needs it)"], answer
