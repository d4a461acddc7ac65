"""`simmoe inspect`: show a trace's provenance, geometry and routing statistics."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("inspect", help="Show a trace's provenance, geometry and routing statistics [not implemented yet]")
    p.set_defaults(func=not_implemented("inspect", "lands with the trace format"))
