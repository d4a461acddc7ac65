"""`simmoe bound`: table 5 of SpecFit on a trace: lambda*, Theta, the Eq. 7 bound."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("bound", help="Table 5 of SpecFit on a trace: lambda*, Theta, the Eq. 7 bound [not implemented yet]")
    p.set_defaults(func=not_implemented("bound", "lands with theory commands"))
