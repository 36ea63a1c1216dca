"""The cycle's node table, kept equal to Redis: loaded on a new term (or after an error), followed
by a warm standby, caught up on a takeover, its rows read again when events name them, and a full
re-read every ``resync_interval``, in slices within ``resync_budget`` (`NodeTableKeeper`)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kubus.core.metrics import Metrics
from kubus.cycle.options import CycleOptions
from kubus.cycle.snapshot import NodeSnapshot, SyncStats
from kubus.framework.runtime import Framework
from kubus.framework.scheduling import PointTimer, Scheduler
from kubus.kernels import Backend
from kubus.runtime.leasing import Leadership
from kubus.runtime.service import TRANSIENT_ERRORS, StructuredLogger
from kubus.store import ClusterState, DecodedRecords, Reservation


@dataclass(frozen=True, slots=True)
class Loaded:
    """A loaded node table and the Scheduler that places pods on it."""

    snapshot: NodeSnapshot
    scheduler: Scheduler


class ResyncPace:
    """When the full re-reads of the table go, and their slices (`CycleOptions.resync_interval`,
    ``resync_slice``, ``resync_budget``). Times are ``clock``'s (default: the event loop's)."""

    def __init__(self, *, options: CycleOptions, clock: Callable[[], float] | None = None) -> None:
        self.options = options
        self.clock = clock or asyncio.get_running_loop().time
        self.left: list[str] = []
        """Nodes the current re-read has still to read, in order; empty between re-reads."""
        self.stats = SyncStats()
        self.started = 0.0
        """When the current re-read began."""
        self.cost = 0.0
        """Seconds the current re-read's slices have taken so far."""
        self.next_resync = 0.0
        """When the next full re-read is due."""
        self.next_slice = 0.0
        """When the current re-read's next slice may go before a batch."""
        self.idle = True
        """The last pop brought no pods: nothing waits on a slice read now."""

    def due(self) -> bool:
        """A full re-read starts every resync_interval (or later: resync_budget); its next slice
        is due at once while the cycle is idle, and within resync_budget while pods wait."""
        now = self.clock()
        if not self.left:
            return now >= self.next_resync
        return self.idle or now >= self.next_slice


class NodeTableKeeper:
    """Keeps the node table (`loaded`) equal to Redis, for the leader and a warm standby alike.

    `loaded` is None until the first load, and again after an error that makes the table suspect
    (`drop`): the next `prepare` or `follow` loads it. ``lock`` is held while a batch is scheduled
    on the table in a worker thread: whatever changes the table from another task waits for it.
    """

    def __init__(
        self,
        *,
        store: ClusterState,
        leadership: Leadership,
        framework: Framework,
        backend: Backend,
        options: CycleOptions,
        timer: PointTimer,
        stopping: asyncio.Event,
        metrics: Metrics,
        log: StructuredLogger,
    ) -> None:
        self.store = store
        self.leadership = leadership
        self.framework = framework
        self.backend = backend
        self.options = options
        self.timer = timer
        self.stopping = stopping
        self.metrics = metrics
        self.log = log
        self.loaded: Loaded | None = None
        """The table and its Scheduler; None until loaded (and after an error that makes it suspect)."""
        self.lock = asyncio.Lock()
        """Held while a batch is scheduled in the worker thread: a hand-over that gives a pod back
        (a table change) waits for it."""
        self.pace = ResyncPace(options=options)
        self.term = 0
        """The lease term the table was loaded or taken over in."""
        self.leading_since = -math.inf
        """When this replica's table was last loaded (a term began; the event loop's clock)."""
        self._dirty: set[str] = set()
        """Nodes events named since their rows were last read."""
        self._noticed: dict[str, Reservation] = {}
        """Other profiles' reservations announced since the last batch, by pod key (`notice`)."""
        self._followed = False
        """The table was kept current while standing by (`follow`): a takeover catches up
        on the rows changed since instead of loading every node."""
        self._decoded = DecodedRecords()
        """Nodes and reservations read before, by their bytes: a re-read parses only what changed."""

    # -- what the rest of the cycle tells it ---------------------------------------------------

    def mark(self, node: str) -> None:
        """The row of ``node`` is read again before the next batch."""
        self._dirty.add(node)

    def notice(self, reservations: Iterable[Reservation]) -> None:
        """Another profile's reservations: taken into the table before the next batch (`refresh`)."""
        for r in reservations:
            self._noticed[r.pod_key] = r

    def placement_of(self, key: str) -> tuple[str, str] | None:
        """(uid, node) of the pod ``key`` as the table accounts it, or will before the next batch
        (another profile announced it); None when neither."""
        if self.loaded is None:
            return None
        placed = self.loaded.snapshot.placed.get(key)
        if placed is not None:
            return placed.uid, placed.node
        if (noticed := self._noticed.get(key)) is not None:
            return noticed.pod_uid, noticed.node
        return None

    def drop(self) -> None:
        """Forget the table (placements may be half-assumed, or Redis was away): the next
        `prepare` or `follow` loads it again."""
        self.loaded, self._followed = None, False

    # -- the leader ------------------------------------------------------------------------------

    async def prepare(self) -> Loaded:
        """Before a batch: load the table on a new term (or after an error), resync it when due,
        and read again the rows events named; the namespaces and workloads as the store has them.
        Returns the table. Raises what Redis raises."""
        leadership, loaded = self.leadership, self.loaded
        if loaded is None or (self.term != leadership.term and not self._followed):
            loaded = await self.load()
        elif self.term != leadership.term:
            self.catch_up(loaded)
        elif self.pace.due():
            await self.resync_slice(loaded.snapshot)
        await self.refresh()
        table = loaded.snapshot.table
        # one round trip's wait for both (each a GET of its version while nothing changed)
        table.namespaces, table.workloads = await asyncio.gather(self.store.namespaces(), self.store.workloads())
        return loaded

    async def load(self) -> Loaded:
        """Read every node and reservation into a new table (a new term, or after an error)."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        self._followed = False
        term = self.leadership.term
        self._dirty.clear()  # events from now on are read again after this snapshot
        self._noticed.clear()  # so are reservations announced from now on
        self.leading_since = loop.time()
        self.pace.left = []  # this read is the full one
        snapshot = NodeSnapshot(self.backend, seed=self.options.seed)
        stats = snapshot.load(await self.store.load_snapshot(decoded=self._decoded))
        scheduler = Scheduler(self.framework, snapshot.table, seed=self.options.seed, timer=self.timer)
        self.loaded, self.term = Loaded(snapshot, scheduler), term
        self.pace.next_resync = loop.time() + self.options.resync_interval
        table = snapshot.table
        unreachable = self.count_nodes(snapshot)
        self.log.info(
            "node table loaded",
            nodes=len(table),
            pods=len(snapshot.placed),
            unreachable=unreachable,
            added=stats.nodes_added,
            assumed=stats.pods_assumed,
            backend=self.backend.name,
            seconds=round(time.perf_counter() - started, 4),
        )
        return self.loaded

    def catch_up(self, loaded: Loaded) -> None:
        """Take over with the table followed while standing by: a new term begins on it, and
        `refresh` reads the rows changed since the last follow. The predecessor's reservations
        not yet bound are news to it: a reservation there is refused (CONFLICT) and the row
        read again, as for another profile's."""
        term = self.leadership.term
        self.term, self._followed = term, False
        self.leading_since = asyncio.get_running_loop().time()
        nodes = len(loaded.snapshot.table)
        self.log.info("node table taken over warm", nodes=nodes, rows_to_read=len(self._dirty), term=term)

    # -- a standby -------------------------------------------------------------------------------

    async def stand_by(self) -> bool:
        """Wait for the lease: True once leading, False once stopping. A warm standby
        (`CycleOptions.warm_standby`) follows the cluster meanwhile (`follow`, every
        ``renew_interval``)."""
        leadership = self.leadership
        while not self.stopping.is_set():
            if leadership.leading:
                return True
            if self.options.warm_standby:
                try:
                    await self.follow()
                except TRANSIENT_ERRORS as exc:
                    self.log.warning("redis unavailable; the standby's node table will be reloaded", error=repr(exc))
                    self.drop()
            if await leadership.wait(self.stopping, timeout=self.options.renew_interval):
                return True
        return False

    async def follow(self) -> None:
        """Keep the table current while standing by, as the leader does between batches: loaded
        once, the rows events named read again, a full re-read every resync_interval within
        resync_budget (a standby is never idle: it shares the machine with the leader)."""
        self.pace.idle = False
        if self.loaded is None:
            await self.load()
        elif self.pace.due():
            await self.resync_slice(self.loaded.snapshot)
        await self.refresh()
        self._followed = True

    # -- reading rows again ----------------------------------------------------------------------

    async def resync_slice(self, snapshot: NodeSnapshot) -> None:
        """Re-read the next `resync_slice` nodes of the current full re-read (starting one when
        due: every node Redis lists or the table holds, so a node added or removed behind a
        missed event is found), diffing them into the table."""
        table, pace, options = snapshot.table, self.pace, self.options
        loop = asyncio.get_running_loop()
        began = time.perf_counter()
        if not pace.left:
            pace.left = sorted(set(await self.store.node_names()) | set(table.row_of))
            pace.started = loop.time()
            pace.stats, pace.cost = SyncStats(), 0.0
        names, pace.left = pace.left[: options.resync_slice], pace.left[options.resync_slice :]
        stats = pace.stats
        snapshot.sync_nodes(names, await self.store.load_snapshot(names, decoded=self._decoded), stats)
        cost = time.perf_counter() - began
        pace.cost += cost
        pace.next_slice = loop.time() + cost * (1 / options.resync_budget - 1)
        if pace.left:
            return
        wait = max(options.resync_interval, pace.cost / options.resync_budget)
        pace.next_resync = pace.started + wait
        unreachable = self.count_nodes(snapshot)
        self.log.log(
            logging.INFO if stats.changed else logging.DEBUG,
            "node table resynced",
            nodes=len(table),
            pods=len(snapshot.placed),
            unreachable=unreachable,
            added=stats.nodes_added,
            updated=stats.nodes_updated,
            removed=stats.nodes_removed,
            assumed=stats.pods_assumed,
            forgotten=stats.pods_forgotten,
            seconds=round(pace.cost, 4),
            next_in=round(wait, 1),
        )

    async def refresh(self, extra: Iterable[str] = ()) -> None:
        """Take in the reservations other profiles announced, then read again, from Redis, the
        rows events named (and ``extra``). Nothing without a table. Raises what Redis raises
        (the rows are read again next time)."""
        if self.loaded is None:
            return
        snapshot = self.loaded.snapshot
        if self._noticed:
            noticed, self._noticed = self._noticed, {}
            self._dirty |= snapshot.noticed(noticed.values())
        names = self._dirty.union(extra)
        if not names:
            return
        self._dirty = set()
        ordered = sorted(names)
        try:
            entries = await self.store.load_snapshot(ordered, decoded=self._decoded)
        except BaseException:
            self._dirty |= names
            raise
        stats = snapshot.sync_nodes(ordered, entries)
        if stats.changed:
            self.log.debug(
                "node rows refreshed",
                nodes=len(ordered),
                added=stats.nodes_added,
                updated=stats.nodes_updated,
                removed=stats.nodes_removed,
                assumed=stats.pods_assumed,
                forgotten=stats.pods_forgotten,
            )

    # -- gauges ----------------------------------------------------------------------------------

    def count_nodes(self, snapshot: NodeSnapshot) -> int:
        """Set the ready/unreachable node gauges from the whole table; returns the unreachable count."""
        unreachable = snapshot.unreachable_nodes()
        self.metrics.nodes.labels(state="ready").set(len(snapshot.table) - unreachable)
        self.metrics.nodes.labels(state="unreachable").set(unreachable)
        return unreachable
