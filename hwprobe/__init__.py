"""hwprobe: run real transformers MoE models with offloaded experts.

Records traces for the simulator, calibrates cost models, and runs live
speculative decoding to check the simulator.  The only package that imports
torch; it is installed with the ``hwprobe`` extra.
"""

__version__ = "0.1.0"
