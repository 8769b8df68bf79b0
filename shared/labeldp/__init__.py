"""labeldp: feature-oblivious label differential privacy.

The labels party privatizes a label set once and pushes one ε-DP message to the
features party, which trains on it. This package holds what both parties share:
the wire schema, the mechanisms and the ε arithmetic.
"""

__version__ = "0.1.0"
