"""``python -m mainsdk_cli``: the ``mainsdk`` command, run by the interpreter it is installed in (no PATH needed)."""

import sys

from mainsdk_cli.cli import main

sys.exit(main())
