"""`python -m analysis.curves`: runs `analysis.tuning.curves` (its --help says what it does)."""

import sys

from analysis.tuning.curves import main

if __name__ == "__main__":
    sys.exit(main())
