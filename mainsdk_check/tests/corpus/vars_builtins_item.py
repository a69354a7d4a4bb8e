# expect: MAIN-SANDBOX-0010 line 6
import builtins


def run(source: str) -> None:
    vars(builtins)["exec"](source)
