"""`hwprobe calibrate`: probe trees at cycle boundaries and fit b_k and beta (SpecFit App. B)."""

from hwprobe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="Probe trees at cycle boundaries and fit b_k and beta (SpecFit App. B) [not implemented yet]")
    p.set_defaults(func=not_implemented("calibrate", "lands with the hwprobe issue"))
