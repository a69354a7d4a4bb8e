# expect: MAIN-SANDBOX-0010 line 6
import os


def read(command: str) -> str:
    return os.popen(command).read()
