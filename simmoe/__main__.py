import os
import signal
import sys


def _interrupted_while_loading(signum, frame):
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_IGN)     # the process is on its way out
    print("simmoe: " + ("terminated" if signum == signal.SIGTERM else "interrupted"), file=sys.stderr)
    sys.exit(128 + signum)


# Ctrl-C or SIGTERM while the command line loads: one line, no traceback (simmoe.cli.main handles them
# from then on)
signal.signal(signal.SIGINT, _interrupted_while_loading)
signal.signal(signal.SIGTERM, _interrupted_while_loading)

from simmoe.cli import main  # noqa: E402

status = main()
if status in (130, 143):
    # Interrupted and cleaned up: leave now.  CPython would otherwise end by killing itself with SIGINT
    # when the interruption had passed through an eval() (namedtuple does one at import), which a shell
    # reports as 130 too but a parent process sees as -2.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
sys.exit(status)
