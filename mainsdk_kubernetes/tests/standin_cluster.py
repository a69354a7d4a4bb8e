"""A whole stand-in cluster for the driver's own tests: the API server, its pods at loopback IPs reached directly
(``reach: pod-ip``, no router), and a kubeconfig file pointing at it, as a user's cluster is reached."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
from mainsdk import Sandbox, SandboxDeps
from mainsdk.config import load_config
from standin_apiserver import ApiServer
from standin_pods import ROOT, Pods

MEMORY = 64 * 1024 * 1024


@attrs.define
class Cluster:
    """A stand-in cluster and the main.yaml that points the driver at it."""

    api: ApiServer
    pods: Pods
    yaml: str

    def stop(self) -> None:
        """Stop the API server and remove every pod."""
        self.api.stop()
        self.pods.close()


def start_cluster(folder: Path, index: int, **options: Any) -> Cluster:
    """A started stand-in cluster; its kubeconfig in ``folder``; ``index`` keeps its pods' IPs apart."""
    pods = Pods(memory=MEMORY, direct=True)
    api = ApiServer(pods, ip_prefix=f"127.{os.getpid() % 200 + 20}.{index + 1}.", **options)
    api.start()
    kubeconfig = folder / f"kubeconfig-{index}"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "standin", "cluster": {"server": api.url}}],
                "users": [{"name": "app", "user": {}}],
                "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "app"}}],
                "current-context": "standin",
            }
        )
    )
    yaml = (
        "sandbox:\n  driver: kubernetes\n  kubernetes:\n"
        f"    namespace: mainsdk\n    warm_pool: python-pool\n    kubeconfig: {kubeconfig}\n    root: {ROOT}\n"
    )
    return Cluster(api, pods, yaml)


def make_sandbox(c: Cluster, folder: Path, extra: str = "", **deps: Any) -> Sandbox:
    """A sandbox on ``c``'s main.yaml, with ``extra`` lines after its kubernetes section."""
    (folder / "main.yaml").write_text(c.yaml + extra)
    return Sandbox(SandboxDeps(config=load_config(folder / "main.yaml"), **deps))
