# expect: MAIN-SANDBOX-0010 line 6
import asyncio


async def run(command: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_shell(command)
