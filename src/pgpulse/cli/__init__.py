"""The ``pgpulse`` command line: a thin edge that parses options and calls the library.

May import every layer (import-linter contracts in pyproject.toml).
"""
