"""What a test needs of the machine, as skip marks shared by the guarantee modules (a reason a user accepts)."""

from __future__ import annotations

import os

import pytest

# The namespace path: user namespaces (the box's uid map) and everything built on them.
NAMESPACES = pytest.mark.skipif(not os.path.exists("/proc/self/ns/user"), reason="needs Linux namespaces")
# A network namespace of the box's own, behind the proxy.
NET_NAMESPACE = pytest.mark.skipif(not os.path.exists("/proc/self/ns/net"), reason="Linux only")
