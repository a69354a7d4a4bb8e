# expect: none
import subprocess


def greet() -> None:
    subprocess.run(["echo hello"], shell=True, check=True)
