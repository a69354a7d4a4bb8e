# expect: MAIN-SANDBOX-0010 line 6
import subprocess


def run(command: str, use_shell: bool) -> int:
    return subprocess.check_call(command, shell=use_shell)
