import sys

from simmoe.cli import main

sys.exit(main())
