"""`python -m analysis.compare_laws`: runs `analysis.fits.compare_laws` (its --help says what it does)."""

import sys

from analysis.fits.compare_laws import main

if __name__ == "__main__":
    sys.exit(main())
