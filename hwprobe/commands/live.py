"""`hwprobe live`: real speculative decoding with any simmoe selector on the offloaded backend."""

from hwprobe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("live", help="Real speculative decoding with any simmoe selector on the offloaded backend [not implemented yet]")
    p.set_defaults(func=not_implemented("live", "lands with the hwprobe issue"))
