# expect: none
import subprocess


def run(command: list[str]) -> None:
    subprocess.run(command, shell=False, check=True)
