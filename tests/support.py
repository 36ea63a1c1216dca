"""Helpers for tests: wait for a condition instead of sleeping; read an HTTP endpoint; where the
test servers are."""

from __future__ import annotations

import asyncio
import inspect
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from kubus.access import ADMIN, Credentials

T = TypeVar("T")

__all__ = ["ServerEndpoints", "eventually", "http_get", "without_post_filter"]


@dataclass(frozen=True, slots=True)
class ServerEndpoints:
    """Where the test servers are, and where they came from (env, testcontainers, embedded)."""

    nats_url: str
    redis_url: str
    source: str
    credentials: Credentials | None = None
    """The users the servers admit (embedded servers); None: the servers take anyone."""

    def login(self, url: str, user: str = ADMIN.name) -> str:
        """``url`` with ``user``'s login when the servers have credentials."""
        return url if self.credentials is None else self.credentials.url(url, user)


async def eventually(check: Callable[[], T | Awaitable[T]], timeout: float = 10.0, interval: float = 0.02) -> T:
    """Run ``check`` (sync or async) until it stops raising AssertionError; return its value.

    Re-raises the last AssertionError when ``timeout`` seconds pass without success. Any other
    exception propagates at once: only an unmet assertion means "not yet".
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            return result  # type: ignore[return-value]
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(interval)


def http_get(url: str) -> tuple[int, str]:
    """(status, body stripped) of a GET; (0, the error) when nothing listens there yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()
    except OSError as error:
        return 0, repr(error)


def without_post_filter(profile: Any) -> Any:
    """A `ProfileConfig` less its PostFilter plugins (DefaultPreemption, in the default profile):
    for comparisons with the reference scheduler, which runs no PostFilter, and for messages
    that are only about Filter."""
    from kubus.framework.registry import ExtensionPoint

    return replace(profile, plugins={**profile.plugins, ExtensionPoint.POST_FILTER: ()})
