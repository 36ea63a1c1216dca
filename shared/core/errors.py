"""The root of kubus's own exceptions."""

from __future__ import annotations


class KubusError(Exception):
    """The base of every error kubus raises on purpose.

    `except KubusError` catches what kubus reports about its input, configuration or
    environment (a bad manifest, a bad scheduler configuration, a missing backend...), and
    nothing that is a bug.
    """


class UsageError(KubusError):
    """The user asked for something that cannot be done as asked (flags, configuration,
    settings); str() is one line. Commands exit 2 for it."""


__all__ = ["KubusError", "UsageError"]
