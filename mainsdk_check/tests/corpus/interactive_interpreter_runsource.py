# expect: MAIN-SANDBOX-0010 line 6
import code


def run(source: str) -> bool:
    return code.InteractiveInterpreter().runsource(source)
