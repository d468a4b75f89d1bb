"""Levels a ``noise`` design factor may take (the neighbours' load, see labkit.run.noise)."""

NOISE_KINDS = ("none", "cpu", "memory", "io", "network")
