"""simmoe: replay speculative decoding on offloaded Mixture-of-Experts models.

The simulator never imports torch; `hwprobe` is the only package that
touches models.
"""

__version__ = "0.1.0"
