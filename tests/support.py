"""Helpers for tests: wait for a condition instead of sleeping."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["eventually"]


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
