import os
import signal
import sys


def _interrupted_while_loading(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the process is on its way out
    print("simmoe: interrupted", file=sys.stderr)
    sys.exit(130)


# Ctrl-C while the command line loads: one line, no traceback (simmoe.cli.main handles it from then on)
signal.signal(signal.SIGINT, _interrupted_while_loading)

from simmoe.cli import main  # noqa: E402

status = main()
if status == 130:
    # Interrupted and cleaned up: leave now.  CPython would otherwise end by killing itself with SIGINT
    # when the interruption had passed through an eval() (namedtuple does one at import), which a shell
    # reports as 130 too but a parent process sees as -2.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)
sys.exit(status)
