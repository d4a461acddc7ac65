"""`hwprobe record`: record a trace: pools, routes, agreement, timings, on a real model."""

from hwprobe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("record", help="Record a trace: pools, routes, agreement, timings, on a real model [not implemented yet]")
    p.set_defaults(func=not_implemented("record", "lands with the hwprobe issue"))
