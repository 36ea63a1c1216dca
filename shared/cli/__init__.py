"""The `kubus` command line."""

from kubus.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
