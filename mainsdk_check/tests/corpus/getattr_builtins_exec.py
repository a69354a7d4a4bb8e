# expect: MAIN-SANDBOX-0010 line 6
import builtins


def run(source: str) -> None:
    getattr(builtins, "exec")(source)  # noqa: B009
