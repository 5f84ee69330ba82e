"""`python -m analysis.report`: the report's command line (`analysis.report.cli`)."""

import sys

from analysis.report.cli import main

sys.exit(main())
