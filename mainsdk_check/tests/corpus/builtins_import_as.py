# expect: MAIN-SANDBOX-0010 line 6
import builtins as b


def run(source: str) -> None:
    b.exec(source)
