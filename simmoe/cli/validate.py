"""`simmoe validate`: compare a replay of a recorded trace with a live run."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("validate", help="Compare a replay of a recorded trace with a live run [not implemented yet]")
    p.set_defaults(func=not_implemented("validate", "lands with the closed loop"))
