"""`ensure_streams` tries a stream again when the server failed to create its store (err_code
10049), and only then: our own retry logic, against a stand-in for the JetStream API."""

from __future__ import annotations

import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from kubus.bus import connection
from kubus.bus.subjects import STREAMS


class _JetStream:
    """Fails ``failures`` add_stream calls with ``error``, then takes every stream."""

    def __init__(self, failures: int, error: nats.js.errors.APIError) -> None:
        self.failures = failures
        self.error = error
        self.calls: list[str] = []

    async def add_stream(self, config: StreamConfig) -> None:
        self.calls.append(config.name or "")
        if self.failures:
            self.failures -= 1
            raise self.error


def _server_error(err_code: int) -> nats.js.errors.ServerError:
    return nats.js.errors.ServerError(code=500, err_code=err_code, description="error creating store for stream")


async def test_a_store_not_created_is_tried_again() -> None:
    js = _JetStream(2, _server_error(10049))
    await connection.ensure_streams(js, STREAMS[:1])  # type: ignore[arg-type]
    assert js.calls == [STREAMS[0].name] * 3


async def test_it_gives_up_after_three_tries_and_other_errors_are_not_retried() -> None:
    js = _JetStream(3, _server_error(10049))
    with pytest.raises(nats.js.errors.ServerError):
        await connection.ensure_streams(js, STREAMS[:1])  # type: ignore[arg-type]
    assert len(js.calls) == 3
    other = _JetStream(1, _server_error(10076))
    with pytest.raises(nats.js.errors.ServerError):
        await connection.ensure_streams(other, STREAMS[:1])  # type: ignore[arg-type]
    assert len(other.calls) == 1
