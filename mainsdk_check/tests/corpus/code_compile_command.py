# expect: MAIN-SANDBOX-0010 line 6
import code


def is_complete(source: str) -> bool:
    return code.compile_command(source) is not None
