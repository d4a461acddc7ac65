"""`simmoe fit`: refit cost-model coefficients (b_k, beta) by NNLS from probe measurements."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("fit", help="Refit cost-model coefficients (b_k, beta) by NNLS from probe measurements [not implemented yet]")
    p.set_defaults(func=not_implemented("fit", "lands with the replay simulator"))
