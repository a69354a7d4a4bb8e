# expect: MAIN-SANDBOX-0010 line 6
import subprocess


def run(command: str) -> None:
    subprocess.run(command, shell=True, check=True)
