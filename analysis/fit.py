"""`python -m analysis.fit`: runs `analysis.fits.cli` (its --help says what it does)."""

import sys

from analysis.fits.cli import main

if __name__ == "__main__":
    sys.exit(main())
