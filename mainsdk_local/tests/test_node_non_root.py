"""Node for an app that is not root (issue 35, point 1): at the default limits, runs and JavaScript cells work.

Without a writable cgroup, memory is RLIMIT_AS, per process. V8 reserves about 750 MiB of address space at start,
so at the 512MB default node died before its first line (SIGTRAP, "Failed to reserve virtual memory for
CodeRange"), and every JS cell's interpreter with it. The driver gives node the limit plus a reserve of address
space and holds its heap to the limit: node starts, and a node that allocates past the limit is still stopped.
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

SYSTEM_PYTHON = "/usr/bin/python3"

AS_NOBODY = """
import json, site, sys
site.addsitedir(sys.argv[1])
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config_text
from mainsdk_local import local_sandbox_driver
config = load_config_text("sandbox: {driver: local}\\n")  # the default limits: memory 512MB
sandbox = Sandbox(SandboxDeps(config=config, driver=local_sandbox_driver(), load_entrypoints=False))
python = sandbox.run("print(1 + 1)")
node = sandbox.run("console.log(1 + 1)", language="node")
big = sandbox.run("const a = []; for (;;) a.push(new Array(1e6).fill(1.5))", language="node")
with sandbox.create() as session:
    cell = session.run_code("const r = await Promise.resolve([3, 1]); r.length", language="javascript")
    again = session.run_code("r[0]", language="javascript")
sandbox.close()
print(json.dumps({"scope": python.memory_limit_scope, "python": python.stdout, "node": [node.stdout, node.stderr],
                  "big": [big.stop, big.signal], "cell": [cell.text, cell.error and cell.error.value, again.text]}))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="running the app as another user needs root")
@pytest.mark.skipif(shutil.which("node") is None, reason="needs node (.ci/run installs it)")
def test_node_runs_and_javascript_cells_work_for_a_non_root_app_at_the_default_limits() -> None:
    if not os.path.exists(SYSTEM_PYTHON) or shutil.which("setpriv") is None:
        pytest.skip(f"needs {SYSTEM_PYTHON} and setpriv (.ci/run installs both)")
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if version != str(sys.version_info[:2]):
        pytest.skip(f"{SYSTEM_PYTHON} is {version}, not this venv's Python: it cannot import the venv's packages")
    readable = readable_copy_of_imports(sysconfig.get_paths()["purelib"], "mainsdk", "mainsdk_local")
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PYTHON, "-c", AS_NOBODY, readable],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["scope"] == "process", answer  # the per-process limit this is about
    assert answer["python"] == "2\n", answer
    assert answer["node"] == ["2\n", ""], answer
    assert answer["big"] == ["memory", None], answer  # the heap is still held to the limit
    assert answer["cell"] == ["2", None, "3"], answer
