"""``python -m simmoe.validation.published``: see :mod:`simmoe.validation.published.cli`."""

import sys

from simmoe.validation.published.cli import main

sys.exit(main())
