import sys

from hwprobe.cli import main

sys.exit(main())
