"""``python -m labkit.images build``: the same as ``labkit images build``."""
import sys

from . import main

sys.exit(main())
