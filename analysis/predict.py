"""`python -m analysis.predict`: runs `analysis.fits.predict` (its --help says what it does)."""

import sys

from analysis.fits.predict import main

if __name__ == "__main__":
    sys.exit(main())
