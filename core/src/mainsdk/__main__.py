"""``python -m mainsdk``: the ``mainsdk`` command, run by the interpreter it is installed in (no PATH needed)."""

import sys

from mainsdk.cli import main

sys.exit(main())
