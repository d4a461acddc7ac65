"""`simmoe sweep`: replay a grid of configurations in parallel into one table."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("sweep", help="Replay a grid of configurations in parallel into one table [not implemented yet]")
    p.set_defaults(func=not_implemented("sweep", "lands with the replay simulator"))
