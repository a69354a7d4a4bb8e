# expect: MAIN-SANDBOX-0010 line 6
import subprocess


def grep(pattern: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(f"grep {pattern} app.log", shell=True)
