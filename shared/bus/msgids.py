"""JetStream message ids (``Nats-Msg-Id``): built here and parsed here, nowhere else.

A stream stores a message whose id it saw within its duplicate window once, so the id says
which publishes are "the same": every retry of one step, by whichever service or replica
redoes it, must build the same id from the same facts.

=========================================  =============================================
id                                         one per
=========================================  =============================================
``submit/<ns>/<name>/<sha256 of bytes>``   manifest content of a pod (an unchanged
                                           re-apply is stored once)
``submits/<digest of submit ids>``         PodList the watcher submits: those pods'
                                           manifests (`submit_list`)
``delete/<ns>/<name>/<uid>/<nonce>``       deletion request
``requeue/<uid>/<attempt>``                hand-back of one scheduling attempt
``bind/<uid>/<attempt>``                   BindRequest of one attempt
``assign/<uid>/<attempt>``                 NodeAssignment of one attempt
``<kind>/<part>/...``                      cluster event (`event`): e.g. ``pod.bound/<uid>/<attempt>``
``<kind>/<digest of uids and attempts>``   ``pods.*`` event (`pod_batch`): those pods at
                                           those attempts
=========================================  =============================================
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from kubus.api.attempts import Attempt
from kubus.bus.subjects import EventKind

__all__ = [
    "assign",
    "bind",
    "delete",
    "event",
    "is_submit_list",
    "pod_batch",
    "requeue",
    "submit",
    "submit_list",
    "submitted_pod",
]


def submit(namespace: str, name: str, manifest: bytes) -> str:
    """The id of a submitted manifest: the same bytes for the same pod are stored once."""
    return f"submit/{namespace}/{name}/{hashlib.sha256(manifest).hexdigest()}"


_SUBMIT_LIST = "submits/"
"""How a `submit_list` id begins."""


def submit_list(ids: Iterable[str]) -> str:
    """The id of a PodList submitted at once: the digest of its pods' `submit` ids, in order."""
    digest = hashlib.blake2b(digest_size=16)
    for msg_id in ids:
        digest.update(f"{msg_id}\n".encode())
    return f"{_SUBMIT_LIST}{digest.hexdigest()}"


def is_submit_list(msg_id: str) -> bool:
    """Whether ``msg_id`` is a `submit_list` id."""
    return msg_id.startswith(_SUBMIT_LIST)


def submitted_pod(msg_id: str) -> tuple[str, str] | None:
    """(namespace, name) of a `submit` id; None for anything else (no id, another kind)."""
    parts = msg_id.split("/")
    if len(parts) == 4 and parts[0] == "submit" and parts[1] and parts[2]:
        return parts[1], parts[2]
    return None


def delete(namespace: str, name: str, uid: str, nonce: int) -> str:
    """The id of one deletion request (``nonce``: e.g. the request's time in ns)."""
    return f"delete/{namespace}/{name}/{uid}/{nonce}"


def requeue(uid: str, attempt: Attempt) -> str:
    """The id of handing back attempt ``attempt`` of a pod."""
    return f"requeue/{uid}/{attempt}"


def bind(uid: str, attempt: Attempt) -> str:
    """The id of the BindRequest of attempt ``attempt``."""
    return f"bind/{uid}/{attempt}"


def assign(uid: str, attempt: Attempt) -> str:
    """The id of the NodeAssignment of attempt ``attempt`` (the binder's and the janitor's are one)."""
    return f"assign/{uid}/{attempt}"


def event(kind: EventKind, *parts: object) -> str:
    """The id of a cluster event: its kind and what makes it one (``uid, attempt``; ``node,
    generation``; a stream sequence)."""
    return "/".join((kind.value, *map(str, parts)))


def pod_batch(kind: EventKind, pods: Iterable[tuple[str, Attempt]]) -> str:
    """The id of a ``pods.*`` event about ``pods`` (uid, attempt), in order."""
    digest = hashlib.blake2b(digest_size=16)
    for uid, attempt in pods:
        digest.update(f"{uid}/{attempt}\n".encode())
    return event(kind, digest.hexdigest())
