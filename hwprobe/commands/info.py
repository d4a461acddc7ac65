"""`hwprobe info`: show the device, link, torch and model facts the probe sees."""

from hwprobe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("info", help="Show the device, link, torch and model facts the probe sees [not implemented yet]")
    p.set_defaults(func=not_implemented("info", "lands with the hwprobe issue"))
