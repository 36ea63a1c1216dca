"""Pods in Redis: their records and phases, transitions, binding, and pod events."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from redis.commands.core import AsyncScript

from kubus.api.attempts import NO_ATTEMPT, Attempt, attempt_arg
from kubus.api.gpus import format_gpu_devices
from kubus.core import codec
from kubus.core.codec import text
from kubus.store._core import _BATCH, _BIND_CHUNK, StoreCore, _code
from kubus.store.records import (
    PodEvent,
    PodPhase,
    PodRecord,
)
from kubus.store.scripts import StoreCode

_PLACEMENTS_CHUNK = 1000
"""Pods one POD_PLACEMENTS call reads (about a millisecond of the server's time)."""


@dataclass(frozen=True, slots=True)
class PodWrite:
    """What put_pod, transition and bind_pod did."""

    code: StoreCode
    version: int = 0
    """The new version (OK), else the current one (0 when NOT_FOUND)."""
    phase: PodPhase | None = None
    """The phase before the change (OK), else the current phase."""

    @property
    def ok(self) -> bool:
        return self.code is StoreCode.OK


@dataclass(frozen=True, slots=True)
class GiveBack:
    """What `ClusterState.give_back` did."""

    code: StoreCode
    """OK (back to Pending), BOUND (refused: a binder has the pod), CONFLICT (refused: not
    Reserved there at that attempt), GONE (deleted) or NOT_FOUND."""
    version: int = 0
    released: bool = False
    """The attempt's room was given back now (announce ``pod.unreserved``); False when it had
    none (never reserved, or released before)."""

    @property
    def ok(self) -> bool:
        return self.code is StoreCode.OK


@dataclass(frozen=True, slots=True)
class Move:
    """One pod for `ClusterState.transition_many`: the arguments of `ClusterState.transition`."""

    uid: str
    phase: PodPhase
    expected_version: int | None = None
    expected_phases: frozenset[PodPhase] | None = None
    node: str | None = None
    gpu_devices: tuple[int, ...] | None = None
    reason: str | None = None
    message: str | None = None
    count_attempt: bool = False
    manifest: bytes | None = None


@dataclass(frozen=True, slots=True)
class Binding:
    """One pod for `ClusterState.bind_many`: bind it to `node` on its reservation's `attempt`."""

    uid: str
    node: str
    attempt: Attempt = NO_ATTEMPT
    """The attempt id (the record's version after its Pending -> Reserved); 0 = any."""
    devices: Sequence[int] = ()
    profile: str = ""
    """The pod's profile (schedulerName); a wrong one costs a retry, never a wrong write."""
    event: PodEvent | None = None
    """Appended to the pod's events when the pod is bound now (not on ALREADY)."""


@dataclass(frozen=True, slots=True)
class BindingResult:
    """What `ClusterState.bind_many` did for one pod: mark_bound, then bind_pod, then (a refused
    bind) release, exactly as the binder's steps one by one would have."""

    marked: StoreCode
    """mark_bound's code: OK, ALREADY, NOT_FOUND (no reservation: the attempt was abandoned) or
    CONFLICT (another attempt's). NOT_FOUND/CONFLICT: nothing else was done."""
    write: PodWrite | None = None
    """bind_pod's result (None when mark_bound refused)."""
    released: StoreCode | None = None
    """release's code when the bind was refused (GONE, CONFLICT, NOT_FOUND), else None."""
    phase: PodPhase | None = None
    """mark_bound refused: the pod's phase now (None without a record)."""
    version: int = 0
    """mark_bound refused: the pod's version now."""
    created_at: float = 0.0
    """Bound (OK or ALREADY): when the pod was accepted."""
    attempts: int = 0
    """Bound (OK or ALREADY): its scheduling attempts."""

    @property
    def bound(self) -> bool:
        """The pod is bound on this node (now, or before: a retry)."""
        return self.write is not None and self.write.code in (StoreCode.OK, StoreCode.ALREADY)


def _binding_result(reply: Sequence[object]) -> BindingResult:
    """One pod's reply of BIND_MANY (not PROFILE) as a BindingResult."""
    marked = _code(reply[0])
    phase_text, version = text(reply[3]), int(text(reply[4]) or 0)
    phase = PodPhase(phase_text) if phase_text else None
    if marked in (StoreCode.NOT_FOUND, StoreCode.CONFLICT):
        return BindingResult(marked, phase=phase, version=version)
    code = _code(reply[1])
    write = PodWrite(code) if code is StoreCode.NOT_FOUND else PodWrite(code, version, phase)
    released = text(reply[2])
    if len(reply) > 5:
        return BindingResult(marked, write, created_at=float(text(reply[5]) or 0.0), attempts=int(text(reply[6]) or 0))
    return BindingResult(marked, write, released=StoreCode(released) if released else None)


class PodStore(StoreCore):
    """Pods: `ClusterState` is one."""

    async def put_pod(self, record: PodRecord) -> bool:
        """Store a newly accepted pod unless one with its uid exists (submissions arrive at least
        once). True when stored now. The record is stored with version 1."""
        record = replace(record, version=1)
        fields = record.to_fields()
        args: list[str | bytes | int | float] = [record.uid, record.key, record.profile]
        for name, value in fields.items():
            args += [name, value]
        reply = await self._run(self.scripts.put_pod, self._pod_keys(record.uid, record.profile), args)
        code = _code(reply[0])
        profile = text(reply[3])
        self._remember_profile(record.uid, profile)
        await self.confirm_replicated()
        return code is StoreCode.OK

    async def put_pods(self, records: Sequence[PodRecord]) -> list[bool]:
        """`put_pod` for many pods at the cost of about one round trip (PUT_PODS: one script
        call per 500 pods). Results in the order of ``records``. A uid given
        twice is stored once: the first wins, the second answers False."""
        out: list[bool] = []
        head = [self.keys.pod_keys_index(), *self.keys.phase_indexes()]
        for start in range(0, len(records), _BATCH):
            chunk = records[start : start + _BATCH]
            keys, args = list(head), []
            for record in chunk:
                keys += [self.keys.pod_record(record.uid), self.keys.pending_index(record.profile)]
                fields = record.to_fields()
                manifest = fields.pop("manifest")
                fields["version"] = "1"  # a stored record starts at version 1
                args += [record.uid, record.key, record.profile, codec.dumps(fields), manifest]
            for record, reply in zip(chunk, await self.scripts.put_pods(keys=keys, args=args), strict=True):
                reply = list(reply)
                self._remember_profile(record.uid, text(reply[3]))
                out.append(_code(reply[0]) is StoreCode.OK)
        if records:
            await self.confirm_replicated()
        return out

    async def get_pod(self, uid: str) -> PodRecord | None:
        raw = await self.redis.hgetall(self.keys.pod_record(uid))
        return PodRecord.from_hash(raw) if raw else None

    async def get_pods(self, uids: Iterable[str]) -> list[PodRecord | None]:
        """The records of these uids, in order (None where there is none)."""
        uids = list(uids)
        out: list[PodRecord | None] = []
        for start in range(0, len(uids), _BATCH):
            pipe = self.redis.pipeline(transaction=False)
            for uid in uids[start : start + _BATCH]:
                pipe.hgetall(self.keys.pod_record(uid))
            out += [PodRecord.from_hash(raw) if raw else None for raw in await pipe.execute()]
        return out

    async def pod_placements(self, uids: Sequence[str]) -> list[tuple[PodPhase, str] | None]:
        """The phase and node ("" for none) of these uids, in order (None where there is no
        record): two fields each, not the record."""
        out: list[tuple[PodPhase, str] | None] = []
        for start in range(0, len(uids), _PLACEMENTS_CHUNK):
            keys = [self.keys.pod_record(uid) for uid in uids[start : start + _PLACEMENTS_CHUNK]]
            reply = await self.scripts.pod_placements(keys=keys)
            for phase, node in zip(reply[::2], reply[1::2], strict=True):
                out.append(None if phase is None else (PodPhase(text(phase)), text(node or b"")))
        return out

    async def find_pod(self, namespace: str, name: str) -> PodRecord | None:
        """The newest pod stored under namespace/name, or None."""
        uid = await self.redis.hget(self.keys.pod_keys_index(), f"{namespace}/{name}")
        return None if uid is None else await self.get_pod(text(uid))

    async def pod_uids_in_phase(self, phase: PodPhase, *, profile: str | None = None) -> set[str]:
        """Uids in a phase, from the index (Pending by profile when given)."""
        if phase is PodPhase.PENDING and profile is not None:
            key = self.keys.pending_index(profile)
        else:
            key = self.keys.phase_index(str(phase))
        return {text(u) for u in await self.redis.smembers(key)}

    async def pods_in_phase(self, phase: PodPhase, *, profile: str | None = None) -> list[PodRecord]:
        """The pods in a phase (of one profile when given), sorted by creation then key. Read
        from the index and checked against the records, so a stale index entry is skipped."""
        uids = sorted(await self.pod_uids_in_phase(phase, profile=profile))
        pods = [
            p
            for p in await self.get_pods(uids)
            if p is not None and p.phase is phase and (profile is None or p.profile == profile)
        ]
        pods.sort(key=lambda p: (p.created_at, p.key, p.uid))
        return pods

    async def _pod_script(self, script: AsyncScript, uid: str, args: Callable[[str], list[str | bytes]]) -> PodWrite:
        profile = await self._profile_of(uid)
        reply = await self._run(script, self._pod_keys(uid, profile), args(profile))
        code = _code(reply[0])
        if code is StoreCode.PROFILE:  # our cached profile was wrong (cannot be, but be safe)
            profile = text(reply[1])
            self._remember_profile(uid, profile)
            reply = await self._run(script, self._pod_keys(uid, profile), args(profile))
            code = _code(reply[0])
        if code is StoreCode.NOT_FOUND:
            self._profiles.pop(uid, None)
            return PodWrite(code)
        if code is StoreCode.PROFILE:
            raise RuntimeError(f"pod {uid}: profile changed under us ({text(reply[1])!r})")
        return PodWrite(code, int(text(reply[1]) or 0), PodPhase(text(reply[2])))

    async def transition(
        self,
        uid: str,
        phase: PodPhase,
        *,
        expected_version: int | None = None,
        expected_phases: Iterable[PodPhase] | None = None,
        node: str | None = None,
        gpu_devices: Sequence[int] | None = None,
        reason: str | None = None,
        message: str | None = None,
        count_attempt: bool = False,
        manifest: bytes | None = None,
    ) -> PodWrite:
        """Move a pod to `phase`, atomically, if it is at `expected_version` and in one of
        `expected_phases` (either may be None: any), and the move is allowed (see TRANSITION
        in kubus.store.scripts). Returns OK, ALREADY, CONFLICT, GONE or NOT_FOUND.

        PENDING clears node and devices; RESERVED needs `node`. `reason`/`message` record the
        last failure (kept when None). `count_attempt` adds one to `attempts`. `manifest`
        replaces the stored manifest (a pending pod resubmitted with changes). Raises
        ValueError for BOUND (use bind_pod) or RESERVED without a node.
        """
        move = Move(
            uid,
            PodPhase(phase),
            expected_version=expected_version,
            expected_phases=None if expected_phases is None else frozenset(PodPhase(p) for p in expected_phases),
            node=node,
            gpu_devices=None if gpu_devices is None else tuple(gpu_devices),
            reason=reason,
            message=message,
            count_attempt=count_attempt,
            manifest=manifest,
        )
        return await self.transition_move(move)

    async def transition_many(self, moves: Sequence[Move]) -> list[PodWrite]:
        """`transition` for many pods in one pipelined round trip, results
        in the order of ``moves``. Each move is atomic on its own, the batch is not."""
        plans = [self._transition_args(m) for m in moves]
        unknown = [m.uid for m, p in zip(moves, plans, strict=True) if not isinstance(p, PodWrite)]
        await self._learn_profiles(unknown)
        pipe = self.redis.pipeline(transaction=False)
        sent = []
        for move, plan in zip(moves, plans, strict=True):
            if isinstance(plan, PodWrite):
                continue
            profile = self._profiles.get(move.uid, "")
            await self.scripts.transition(keys=self._pod_keys(move.uid, profile), args=plan(profile), client=pipe)
            sent.append(move)
        replies = iter(await pipe.execute() if sent else [])
        out: list[PodWrite] = []
        for move, plan in zip(moves, plans, strict=True):
            if isinstance(plan, PodWrite):
                out.append(plan)
                continue
            reply = list(next(replies))
            code = _code(reply[0])
            if code is StoreCode.PROFILE:  # our profile guess was wrong: that one again, alone
                out.append(await self.transition_move(move))
            elif code is StoreCode.NOT_FOUND:
                self._profiles.pop(move.uid, None)
                out.append(PodWrite(code))
            else:
                out.append(PodWrite(code, int(text(reply[1]) or 0), PodPhase(text(reply[2]))))
        if any(m.phase is PodPhase.DELETED for m in sent):
            await self.confirm_replicated()
        return out

    async def transition_move(self, move: Move) -> PodWrite:
        """`transition` with its arguments as a `Move`."""
        args = self._transition_args(move)
        if isinstance(args, PodWrite):
            return args
        write = await self._pod_script(self.scripts.transition, move.uid, args)
        if move.phase is PodPhase.DELETED:  # an acknowledged deletion must not come undone
            await self.confirm_replicated()
        return write

    async def _learn_profiles(self, uids: Iterable[str]) -> None:
        """Read, in one round trip, the profiles of the pods whose profile is not cached."""
        missing = [uid for uid in dict.fromkeys(uids) if uid not in self._profiles]
        if not missing:
            return
        pipe = self.redis.pipeline(transaction=False)
        for uid in missing:
            pipe.hget(self.keys.pod_record(uid), "profile")
        for uid, profile in zip(missing, await pipe.execute(), strict=True):
            if profile:
                self._remember_profile(uid, text(profile))

    def _transition_args(self, move: Move) -> Callable[[str], list[str | bytes]] | PodWrite:
        """The TRANSITION script's arguments for ``move`` (given the pod's profile), or the
        answer when no script needs to run. Raises ValueError like `transition`."""
        phase = move.phase
        if phase is PodPhase.BOUND:
            raise ValueError("a pod is bound with bind_pod, not transition")
        if phase is PodPhase.RESERVED and not move.node:
            raise ValueError(f"pod {move.uid}: Reserved needs the node")
        fields: dict[str, str | bytes] = {}
        if phase is PodPhase.PENDING:
            fields["node"] = ""
            fields["gpu_devices"] = ""
        else:
            if move.node is not None:
                fields["node"] = move.node
            if move.gpu_devices is not None:
                fields["gpu_devices"] = format_gpu_devices(list(move.gpu_devices))
        if move.reason is not None:
            fields["reason"] = move.reason
        if move.message is not None:
            fields["message"] = move.message
        if move.manifest is not None:
            fields["manifest"] = move.manifest
        phases = move.expected_phases
        expected = ",".join(sorted(str(p) for p in phases)) if phases is not None else ""
        if phases is not None and not expected:
            return PodWrite(StoreCode.CONFLICT)  # no phase is acceptable
        now = repr(float(self.clock()))
        version = "" if move.expected_version is None else str(move.expected_version)
        count = "1" if move.count_attempt else "0"

        def args(profile: str) -> list[str | bytes]:
            out: list[str | bytes] = [str(phase), version, expected, profile, now, count]
            for name, value in fields.items():
                out += [name, value]
            return out

        return args

    async def give_back(
        self, uid: str, node: str, attempt: Attempt, *, reason: str | None = None, message: str | None = None
    ) -> GiveBack:
        """Reserved -> Pending for attempt ``attempt`` on ``node``, with that attempt's room on
        the node given back, in one atomic step (GIVE_BACK in kubus.store.scripts): what every
        failure between Reserve and Bind does (a refused reservation, a lost lease, a bind that
        failed, the janitor's timeout), before the pod is queued again. ``reason``/``message``
        record why (kept when None). Idempotent: a retry answers CONFLICT (the pod moved on),
        never undoes a newer attempt, and never frees a bound reservation (BOUND)."""
        fields: list[str] = []
        if reason is not None:
            fields += ["reason", reason]
        if message is not None:
            fields += ["message", message]
        now = repr(float(self.clock()))
        node_keys = self.keys.node_keys(node)[:4]
        args = [uid, attempt_arg(attempt), "", node, now, *fields]
        for _ in range(2):  # a second time when the cached profile was not the pod's
            profile = await self._profile_of(uid)
            args[2] = profile
            reply = await self._run(self.scripts.give_back, [*self._pod_keys(uid, profile), *node_keys], args)
            code = _code(reply[0])
            if code is StoreCode.PROFILE:
                self._remember_profile(uid, text(reply[1]))
                continue
            if code is StoreCode.NOT_FOUND:
                self._profiles.pop(uid, None)
                return GiveBack(code)
            released = len(reply) > 4 and text(reply[4]) == "OK"
            return GiveBack(code, int(text(reply[1]) or 0), released)
        raise RuntimeError(f"pod {uid}: profile changed under us")

    async def bind_pod(
        self, uid: str, node: str, devices: Sequence[int] = (), *, expected_version: int | None = None
    ) -> PodWrite:
        """Bind the pod to the node, exactly once (see BIND_POD in kubus.store.scripts): OK,
        ALREADY (bound to this node before: an idempotent retry), CONFLICT (bound or reserved
        elsewhere, or not at `expected_version`), GONE (deleted) or NOT_FOUND."""
        now = repr(float(self.clock()))
        devices_text = format_gpu_devices(list(devices))
        expected = "" if expected_version is None else str(expected_version)
        write = await self._pod_script(
            self.scripts.bind_pod, uid, lambda profile: [node, devices_text, profile, now, expected]
        )
        await self.confirm_replicated()  # before anyone announces the binding
        return write

    async def bind_many(self, bindings: Sequence[Binding]) -> list[BindingResult]:
        """The binder's Bind step for many pods at the cost of about one round trip: per pod,
        ``mark_bound(node, uid, attempt)``; unless refused, ``bind_pod(uid, node, devices,
        expected_version=attempt)``; bound now: `Binding.event` appended; bind refused (GONE,
        CONFLICT, NOT_FOUND): ``release(node, uid, attempt)``. On a single Redis each pod's
        steps are one atomic script (BIND_MANY in kubus.store.scripts), so a crash leaves a pod
        either untouched or done; the batch as a whole is not atomic. Idempotent like the
        steps. Results in the order of `bindings`."""
        out: list[BindingResult | None] = [None] * len(bindings)
        todo = [(i, b, b.profile) for i, b in enumerate(bindings)]
        for _ in range(2):  # a second round for pods whose profile was not the one given
            retry: list[tuple[int, Binding, str]] = []
            for start in range(0, len(todo), _BIND_CHUNK):
                chunk = todo[start : start + _BIND_CHUNK]
                keys: list[str] = self.keys.phase_indexes()
                args: list[str | bytes | int | float] = [repr(float(self.clock())), self.event_cap]
                for _i, b, profile in chunk:
                    keys += self.keys.node_keys(b.node)[:4]
                    keys += [self.keys.pod_record(b.uid), self.keys.pod_events(b.uid), self.keys.pending_index(profile)]
                    args += [
                        b.uid,
                        attempt_arg(b.attempt),
                        b.node,
                        format_gpu_devices(list(b.devices)),
                        profile,
                        b.event.encode() if b.event is not None else b"",
                    ]
                replies = await self.scripts.bind_many(keys=keys, args=args)
                for (i, b, _profile), reply in zip(chunk, replies, strict=True):
                    reply = list(reply)
                    if _code(reply[0]) is StoreCode.PROFILE:
                        retry.append((i, b, text(reply[1])))
                    else:
                        out[i] = _binding_result(reply)
            if not retry:
                break
            todo = retry
        else:
            raise RuntimeError(f"pod {todo[0][1].uid}: profile changed under us")
        if bindings:
            await self.confirm_replicated()  # before anyone announces the bindings
        return [r for r in out if r is not None]

    async def append_event(self, uid: str, event: PodEvent) -> None:
        """Add an event to the pod's history, keeping the newest `event_cap`."""
        await self.append_events([(uid, event)])

    async def append_events(self, events: Sequence[tuple[str, PodEvent]]) -> None:
        """`append_event` for many (pod uid, event) pairs, in order, in one round trip (a batch's
        preemptors each note their preemption)."""
        if not events:
            return
        pipe = self.redis.pipeline(transaction=True)
        for uid, event in events:
            key = self.keys.pod_events(uid)
            pipe.rpush(key, event.encode())
            pipe.ltrim(key, -self.event_cap, -1)
        await pipe.execute()

    async def events(self, uid: str) -> list[PodEvent]:
        """The pod's events, oldest first."""
        return [PodEvent.decode(e) for e in await self.redis.lrange(self.keys.pod_events(uid), 0, -1)]

    async def events_of(self, uids: Sequence[str]) -> list[list[PodEvent]]:
        """Each pod's events, oldest first, in the order of ``uids``: one pipelined round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for uid in uids:
            pipe.lrange(self.keys.pod_events(uid), 0, -1)
        return [[PodEvent.decode(e) for e in raw] for raw in await pipe.execute()]
