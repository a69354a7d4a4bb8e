# expect: MAIN-SANDBOX-0010 line 10
from collections.abc import Callable

try:
    from builtins import exec as run_code
except ImportError:
    run_code: Callable[[str], None] | None = None  # type: ignore[no-redef]

if run_code is not None:
    run_code(input())
