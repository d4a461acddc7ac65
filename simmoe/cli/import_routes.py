"""`simmoe import-routes`: turn routing logs of other tools into an autoregressive trace."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("import-routes", help="Turn routing logs of other tools into an autoregressive trace [not implemented yet]")
    p.set_defaults(func=not_implemented("import-routes", "lands with the trace format"))
