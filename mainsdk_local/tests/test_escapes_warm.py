"""Every escape test of test_escapes.py again, with each run the warm pool can take on a pool entry.

The escape tests pass with the pool on, but most of their runs find no entry ready and run cold (6 of 37 python
runs were warm, when only Python had a pool). Here ``pool_forcing`` makes entries of the run's kinds ready first,
and each such run (python, bash, node) must have taken one: the escapes are tried from inside a warm interpreter
or a pre-exec box, whose box was made before the run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pool_forcing import force_warm, pool_works
from test_guarantee_filesystem import *  # noqa: F403 - the same tests, collected again under the fixture below

pytestmark = pytest.mark.skipif(
    not pool_works(), reason="the warm pool needs namespaces and memory and pids cgroups (root): not here"
)


@pytest.fixture(autouse=True)
def every_python_run_warm(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    seen = force_warm(monkeypatch)
    yield
    assert not seen.cold, f"{len(seen.cold)} runs the pool could take ran cold ({seen.warm} warm): {seen.cold}"
    assert not seen.unpooled, f"{seen.unpooled} python runs had no warm pool (is sandbox.local.pool 0?)"
