"""Exact subtree selection for speculative decoding on MoE models (pure computation).

No I/O, no import of simmoe or torch.  See the SpecFit paper (§3, App. A).
"""
