"""``python -m mainsdk_check``: the same as ``mainsdk check``."""

import sys

from mainsdk_check.command import main

sys.exit(main())
