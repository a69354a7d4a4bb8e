# expect: MAIN-SANDBOX-0010 line 6
import os


def list_folder(folder: str) -> int:
    return os.system("ls " + folder)
