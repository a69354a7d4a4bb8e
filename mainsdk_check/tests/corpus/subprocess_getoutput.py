# expect: MAIN-SANDBOX-0010 line 6
from subprocess import getoutput


def status(service: str) -> str:
    return getoutput("systemctl status " + service)
