"""`simmoe replay`: replay a trace under selectors, cache and hardware profile."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("replay", help="Replay a trace under selectors, cache and hardware profile [not implemented yet]")
    p.set_defaults(func=not_implemented("replay", "lands with the replay simulator"))
