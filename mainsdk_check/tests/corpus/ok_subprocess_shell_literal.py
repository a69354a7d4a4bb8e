# expect: none
import subprocess


def count() -> None:
    subprocess.run("ls -l | wc -l", shell=True, check=True)
