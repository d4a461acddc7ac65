"""`simmoe hardness`: cLIQUE-reduction instances decided by the exact selector and networkx."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("hardness", help="CLIQUE-reduction instances decided by the exact selector and networkx [not implemented yet]")
    p.set_defaults(func=not_implemented("hardness", "lands with theory commands"))
