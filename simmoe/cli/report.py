"""`simmoe report`: regenerate the reports (tables and plots) from traces."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("report", help="Regenerate the reports (tables and plots) from traces [not implemented yet]")
    p.set_defaults(func=not_implemented("report", "lands with reports"))
