# expect: none
import asyncio
import os


async def list_folder(folder: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec("ls", "-l", folder)


def replace_process(folder: str) -> None:
    os.execvp("ls", ["ls", "-l", folder])
