"""Assisted-decoding playground: see what drafting does, step by step, and whether it pays."""

__version__ = "0.1.0"
