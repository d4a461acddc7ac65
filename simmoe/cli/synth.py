"""`simmoe synth`: generate a seeded synthetic trace (calibrated presets)."""

from simmoe.cli import not_implemented


def register(sub) -> None:
    p = sub.add_parser("synth", help="Generate a seeded synthetic trace (calibrated presets) [not implemented yet]")
    p.set_defaults(func=not_implemented("synth", "lands with synthetic traces"))
