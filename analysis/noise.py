"""`python -m analysis.noise`: runs `analysis.verdicts.noise` (its --help says what it does)."""

import sys

from analysis.verdicts.noise import main

if __name__ == "__main__":
    sys.exit(main())
