# expect: MAIN-SANDBOX-0010 line 6
import runpy


def run_script(path: str) -> dict[str, object]:
    return runpy.run_path(path)
