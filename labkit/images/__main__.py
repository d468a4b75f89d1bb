"""``python -m labkit.images build``: the same as ``labkit images build``."""

import sys

from .fallback_cli import main

sys.exit(main())
