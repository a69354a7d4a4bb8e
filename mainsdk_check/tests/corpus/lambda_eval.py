# expect: MAIN-SANDBOX-0010 line 4
from collections.abc import Callable

calculate: Callable[[str], object] = lambda text: eval(text.strip())  # noqa: E731
