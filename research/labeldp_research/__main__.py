"""``python -m labeldp_research``."""

import sys

from labeldp_research.cli import main

sys.exit(main())
