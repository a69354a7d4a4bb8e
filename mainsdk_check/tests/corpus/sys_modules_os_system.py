# expect: MAIN-SANDBOX-0010 line 6
import sys


def run(command: str) -> int:
    return sys.modules["os"].system(command)
