"""`hwprobe selftest`: gPU self-check: bandwidth, offload equality, short record and calibrate."""

from hwprobe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("selftest", help="GPU self-check: bandwidth, offload equality, short record and calibrate [not implemented yet]")
    p.set_defaults(func=not_implemented("selftest", "lands with the hwprobe issue"))
