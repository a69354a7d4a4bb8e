# expect: MAIN-SANDBOX-0010 line 7 silenced
# expect: MAIN-SANDBOX-0010 line 11
import subprocess


def trusted(command: str) -> None:
    subprocess.run(command, shell=True, check=True)  # mainsdk: allow MAIN-SANDBOX-0010


def untrusted(command: str) -> None:
    subprocess.run(command, shell=True, check=True)
