"""`python -m analysis.tuning_validation`: runs `analysis.tuning.tuning_validation` (its --help says what it does)."""

import sys

from analysis.tuning.tuning_validation import main

if __name__ == "__main__":
    sys.exit(main())
