"""The kinds of pool entry a server offers, most preferred first (see ``pool.Kind``).

For an exec several kinds can take, the first with a ready entry serves it, and the demand counts for
the first that can take it at all.
"""

from __future__ import annotations

from .node_pool import NodeStub
from .pool import Kind
from .pool_exec import PreExec
from .pool_python import PythonStub

KINDS: tuple[Kind, ...] = (PythonStub(), NodeStub(), PreExec())
