"""`hwprobe bandwidth`: host-to-device copy sweep around one expert's size (GB/s)."""

from hwprobe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("bandwidth", help="Host-to-device copy sweep around one expert's size (GB/s) [not implemented yet]")
    p.set_defaults(func=not_implemented("bandwidth", "lands with the hwprobe issue"))
