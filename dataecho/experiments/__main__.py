"""``python -m dataecho.experiments {reproduce,report} ...``."""

import sys

from .cli import main

sys.exit(main())
