# expect: MAIN-SANDBOX-0010 line 6
import subprocess


def run(command: str) -> int:
    return subprocess.call(args=command, shell=True)
