"""kubectl's NotFound: the error a command exits 1 with, its one line, and a listing reported
with the NotFound lines of the names asked for that it lacks."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from kubus.cli.output import Listing, Output, print_listing
from kubus.core.errors import KubusError

__all__ = ["NotFoundError", "not_found", "report"]


class NotFoundError(KubusError):
    """What a command was asked about is not there (kubectl's NotFound); str() is one line.
    Commands exit 1 for it, as kubectl does."""


def not_found(resource: str, name: str, namespace: str | None = None) -> str:
    """kube's NotFound line: 'pods "web" not found in namespace "shop"'."""
    return f'{resource} "{name}" not found' + (f' in namespace "{namespace}"' if namespace else "")


def report(listing: Listing, missing: Sequence[str], out: TextIO, output: Output, *, empty: str) -> int:
    """Print a listing, then its NotFound lines on stderr (nothing else when every name asked
    for was missing); exit status 1 when a name was missing, else 0."""
    if listing.rows or not missing:
        print_listing(listing, out, output, empty=empty)
    for line in missing:
        sys.stderr.write(f"error: {line}\n")
    return 1 if missing else 0
