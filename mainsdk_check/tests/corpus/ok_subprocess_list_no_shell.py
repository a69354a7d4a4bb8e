# expect: none
import subprocess


def list_folder(folder: str) -> None:
    subprocess.run(["ls", "-l", folder], check=True)
