"""``python -m inference4py``: the command line interface (see :mod:`inference4py.cli`)."""

import sys

from inference4py.cli import main

if __name__ == "__main__":
    sys.exit(main())
