# expect: MAIN-SANDBOX-0010 line 6
import subprocess


def du(folder: str) -> bytes:
    return subprocess.check_output("du -sh {}".format(folder), shell=True)  # noqa: UP032
