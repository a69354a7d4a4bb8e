# expect: MAIN-SANDBOX-0010 line 6
import subprocess as sp


def run(cmd: str) -> None:
    sp.run(cmd, shell=True, check=False)
