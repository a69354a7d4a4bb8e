# expect: none
# eval(user_input) in a comment is not code.

HELP = "never call eval(user_input) or subprocess.run(cmd, shell=True)"


def explain() -> str:
    """Do not write exec(source) in a handler."""
    return HELP
