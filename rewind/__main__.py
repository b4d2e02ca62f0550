"""`python -m rewind ...`: the same command line as the `rewind` console script (rewind.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
