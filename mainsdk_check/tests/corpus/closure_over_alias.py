# expect: MAIN-SANDBOX-0010 line 9
from collections.abc import Callable


def make_runner(source: str) -> Callable[[], None]:
    run = exec

    def inner() -> None:
        run(source)

    return inner
