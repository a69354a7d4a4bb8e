# expect: MAIN-SANDBOX-0010 line 8
import code


def feed(lines: list[str]) -> None:
    console = code.InteractiveConsole()
    for line in lines:
        console.push(line)
