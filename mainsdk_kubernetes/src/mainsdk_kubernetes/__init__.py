"""mainsdk-kubernetes: the ``kubernetes`` driver of mainsdk sandbox (pods claimed from an agent-sandbox warm pool)."""

from mainsdk_kubernetes.driver import (
    KubernetesBox,
    KubernetesDriver,
    driver_from_config,
    isolation_of,
    kubernetes_driver,
)

__all__ = ["KubernetesBox", "KubernetesDriver", "driver_from_config", "isolation_of", "kubernetes_driver"]
