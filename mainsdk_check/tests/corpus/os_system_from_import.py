# expect: MAIN-SANDBOX-0010 line 6
from os import system as shell


def run(command: str) -> int:
    return shell(command)
