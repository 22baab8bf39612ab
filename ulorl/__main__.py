"""`python -m ulorl ...`: the same command line as the `ulorl` script (for launchers that run a module)."""

import sys

from ulorl.cli import main

if __name__ == "__main__":
    sys.exit(main())
