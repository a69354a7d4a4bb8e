"""``python -m mainsdk.check``: the same as ``mainsdk check``."""

import sys

from mainsdk.check.command import main

sys.exit(main())
