"""``python -m bench``: see :mod:`bench.run`."""

import sys

from bench.run import main

sys.exit(main())
