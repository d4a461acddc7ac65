"""simmoe: replay speculative decoding on offloaded Mixture-of-Experts models.

The simulator never imports torch; `hwprobe` is the only package that
touches models.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `simmoe.tune(...)`: the tuning package, callable, imported when first used (docs/tune.md)
    if name == "tune":
        import importlib

        return importlib.import_module("simmoe.tune")
    raise AttributeError(f"module 'simmoe' has no attribute {name!r}")
