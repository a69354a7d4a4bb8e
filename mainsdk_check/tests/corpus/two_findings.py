# expect: MAIN-SANDBOX-0010 line 7
# expect: MAIN-SANDBOX-0010 line 11
import subprocess


def calculate(expression: str) -> object:
    return eval(expression)


def run(command: str) -> None:
    subprocess.run(command, shell=True, check=True)
