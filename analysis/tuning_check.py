"""`python -m analysis.tuning_check`: runs `analysis.tuning.tuning_check` (its --help says what it does)."""

import sys

from analysis.tuning.tuning_check import main

if __name__ == "__main__":
    sys.exit(main())
