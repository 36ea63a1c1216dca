"""`python -m kubus.cli ...`: the `kubus` command without the console script."""

import sys

from kubus.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
