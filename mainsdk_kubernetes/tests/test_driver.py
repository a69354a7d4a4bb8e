"""The kubernetes driver against the stand-in cluster, live on loopback: isolation, warm claims with secrets, the
refusals before anything starts, the config section, the entry point and the tutorial."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import mainsdk
import pytest
from mainsdk import secret
from mainsdk.config import load_config
from mainsdk.default import reset_default_sandbox
from mainsdk.entry_points import installed_drivers
from mainsdk_kubernetes.cluster import Template
from mainsdk_kubernetes.config import KubernetesConfig
from mainsdk_kubernetes.driver import isolation_of, kubernetes_driver
from standin_cluster import make_sandbox
from standin_pods import ROOT, memory_cgroups


def test_a_run_is_a_warm_claim_and_reports_the_runtime_class_isolation(cluster: Any, tmp_path: Path) -> None:
    c = cluster()
    result = make_sandbox(c, tmp_path).run("import os; print(os.getcwd())")
    assert (result.exit_code, result.stdout, result.isolation) == (0, f"{ROOT}/work\n", "microvm"), result.stderr
    assert c.api.cold_starts == 0 and len(c.api.claim_bodies) == 1
    assert c.api.claims == {}  # deleted at the end: the pod and what it ran went with it


def test_a_run_naming_a_secret_is_served_warm_and_the_secret_never_reaches_the_claim(
    cluster: Any, tmp_path: Path
) -> None:
    c = cluster()
    box = make_sandbox(c, tmp_path, "  secrets: [API_KEY]\n", secret={"API_KEY": "s3cr3t-v4lue"}.get)
    result = box.run("import os; print(os.environ['K'] == 's3cr3t-v4lue')", env={"K": secret("API_KEY")})
    assert result.stdout == "True\n", result.stderr
    assert c.api.cold_starts == 0
    [claim] = c.api.claim_bodies
    assert "env" not in claim["spec"] and "s3cr3t-v4lue" not in json.dumps(claim)


def test_the_containers_own_environment_does_not_reach_the_code(cluster: Any, tmp_path: Path) -> None:
    c = cluster()
    result = make_sandbox(c, tmp_path).run("import os; print(sorted(os.environ))", env={"A": "1"})
    # Core's LC_CTYPE and the image's PATH and HOME: no KUBERNETES_*, SANDBOXD_*, HOSTNAME of the container's.
    assert result.stdout == "['A', 'HOME', 'LC_CTYPE', 'PATH']\n", result.stderr


def test_plain_runc_is_refused_before_anything_starts_unless_named(cluster: Any, tmp_path: Path) -> None:
    c = cluster(runtime_class=None)
    with pytest.raises(mainsdk.SandboxError) as refused:
        make_sandbox(c, tmp_path).run("print(1)")
    assert refused.value.code == "MAIN-SANDBOX-0001" and "allow_runc" in refused.value.message
    assert c.api.claim_bodies == []
    allowed = make_sandbox(c, tmp_path, "    allow_runc: true\n").run("print(1)")
    assert (allowed.stdout, allowed.isolation) == ("1\n", "namespace")


def test_a_pod_not_running_the_templates_runtime_class_is_not_used(cluster: Any, tmp_path: Path) -> None:
    c = cluster(pod_runtime_class=None)  # the template says kata; the pod runs plain runc
    with pytest.raises(mainsdk.SandboxError) as refused:
        make_sandbox(c, tmp_path).run("print(1)")
    assert refused.value.code == "MAIN-SANDBOX-0006" and "RuntimeClass" in refused.value.message
    assert len(c.api.claim_bodies) == 1 and c.api.claims == {}  # claimed, never run in, deleted
    assert c.pods.starts == []


@pytest.mark.parametrize(
    ("handler", "isolation"),
    [("kata-qemu", "microvm"), ("kata-fc", "microvm"), ("firecracker", "microvm"), ("runsc", "namespace")],
)
def test_isolation_follows_the_runtime_class_handler(handler: str, isolation: str) -> None:
    template = Template("t", "rc", handler, None, True)
    assert isolation_of(template, KubernetesConfig()) == isolation


def test_an_unknown_handler_is_refused_until_mapped() -> None:
    template = Template("t", "rc", "my-vm", None, True)
    with pytest.raises(mainsdk.SandboxError) as refused:
        isolation_of(template, KubernetesConfig())
    assert refused.value.code == "MAIN-SANDBOX-0001" and "runtime_isolation" in refused.value.message
    assert isolation_of(template, KubernetesConfig(runtime_isolation={"my-vm": "microvm"})) == "microvm"


@pytest.mark.parametrize(
    "options",
    [{"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}, {"management": "Unmanaged"}],
    ids=["an-egress-rule", "unmanaged"],
)
def test_a_template_that_lets_egress_out_is_refused_before_any_claim(
    cluster: Any, tmp_path: Path, options: dict[str, Any]
) -> None:
    c = cluster(**options)
    with pytest.raises(mainsdk.SandboxError) as refused:
        make_sandbox(c, tmp_path).run("print(1)")
    assert refused.value.code == "MAIN-SANDBOX-0001" and "networkPolicy" in refused.value.message
    assert c.api.claim_bodies == []


def test_hosts_are_refused_before_any_claim(cluster: Any, tmp_path: Path) -> None:
    c = cluster()
    box = make_sandbox(c, tmp_path, "permissions:\n  network: { hosts: [example.com] }\n")
    with pytest.raises(mainsdk.SandboxError) as refused:
        box.run("print(1)", network=["example.com"])
    assert refused.value.code == "MAIN-SANDBOX-0005"
    assert c.api.claim_bodies == []


def test_a_memory_limit_below_the_pods_is_refused_naming_both(cluster: Any, tmp_path: Path) -> None:
    c = cluster(memory="128Mi")
    with pytest.raises(mainsdk.SandboxError) as refused:
        make_sandbox(c, tmp_path).run("print(1)", limits={"memory": "64MB"})
    assert refused.value.code == "MAIN-SANDBOX-0001"
    assert "64MB" in refused.value.message and "128Mi" in refused.value.message
    assert c.api.claim_bodies == []


def test_an_oom_kill_of_the_pod_is_a_memory_stop(cluster: Any, tmp_path: Path) -> None:
    c = cluster()
    if not memory_cgroups():
        pytest.skip("this machine gives the stand-in no memory cgroup to make its pods' limit with")
    result = make_sandbox(c, tmp_path).run("b = bytearray(300 * 1024 * 1024)\nprint('survived')")
    assert (result.stop, result.stop_code) == ("memory", "MAIN-SANDBOX-0003") and "survived" not in result.stdout


def test_the_section_is_checked_at_load_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "main.yaml").write_text("sandbox:\n  driver: kubernetes\n  kubernetes:\n    warm_pool: Not_A_Name\n")
    with pytest.raises(mainsdk.ConfigError) as caught:
        load_config(tmp_path / "main.yaml")
    assert "line 3" in str(caught.value) and "warm_pool" in str(caught.value)


def test_without_a_warm_pool_a_run_is_refused_saying_what_to_set(tmp_path: Path) -> None:
    (tmp_path / "main.yaml").write_text("sandbox:\n  driver: kubernetes\n")
    config = load_config(tmp_path / "main.yaml")
    driver = kubernetes_driver(config.sandbox.section("kubernetes", KubernetesConfig), api_url="http://127.0.0.1:9")
    with pytest.raises(mainsdk.SandboxError) as refused:
        driver.mainsdk_driver_capabilities()
    assert refused.value.code == "MAIN-SANDBOX-0001" and "warm_pool" in refused.value.message


def test_the_entry_point_is_listed_by_mainsdk_sandbox_drivers() -> None:
    assert "kubernetes" in [d.id for d in installed_drivers()]
    mainsdk_command = shutil.which("mainsdk", path=os.path.dirname(sys.executable))
    if mainsdk_command is None:
        pytest.skip("mainsdk-cli is not installed here (tox -e kubernetes installs it)")
    listed = subprocess.run([mainsdk_command, "sandbox", "drivers"], capture_output=True, text=True, check=True)
    assert any(line.split()[:2] == ["kubernetes", "mainsdk-kubernetes"] for line in listed.stdout.splitlines())


# The tutorial (shared/seeds/sandbox-tutorial.md; tests/test_tutorial.py runs it on the local driver), unchanged
# but for the driver its main.yaml names.
TUTORIAL = """
  limits: { timeout: 30s, output: 1MB }
permissions:
  processes: [python3]
  disk: { temp: { max: 1GB } }
audit: { file: audit.jsonl }
"""


def test_driver_kubernetes_in_main_yaml_runs_the_tutorial(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mainsdk import sandbox

    c = cluster()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MAINSDK_CONFIG", raising=False)
    monkeypatch.delenv("MAINSDK_ENV", raising=False)
    (tmp_path / "main.yaml").write_text(c.yaml + TUTORIAL)
    reset_default_sandbox()
    try:
        out = sandbox.run(code="print(1 + 1)", language="python", feature="notebook")
        assert out.stdout == "2\n", out.stderr
        stopped = sandbox.run(code="while True: pass", language="python", feature="notebook", limits={"timeout": "1s"})
        assert stopped.stop == "timeout"
        chart = sandbox.run(
            language="python",
            feature="chart",
            files={"data.csv": "a,1\nb,2\nc,3\n"},
            code="rows = open('data.csv').read().splitlines()\nopen('../out/count.txt', 'w').write(str(len(rows)))",
        )
        [ref] = chart.files
        assert ref.name == "count.txt" and sandbox.files.read(ref) == b"3"
        with pytest.raises(mainsdk.SandboxError) as host:
            sandbox.run(code="print(1)", language="python", feature="weather", network=["pypi.org"])
        assert host.value.code == "MAIN-SANDBOX-0005"
    finally:
        reset_default_sandbox()
    events = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [e["feature"] for e in events][:3] == ["notebook", "notebook", "chart"]
    assert events[0]["isolation"] == "microvm" and events[1]["stop"] == "timeout"
