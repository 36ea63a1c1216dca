"""The cycle's node table carries the namespaces' labels as the store has them (for
namespaceSelectors): loaded when it becomes leader, and read again once a namespace changes."""

from __future__ import annotations

from support import eventually

from kubus.api.manifests import parse_node
from kubus.api.namespaces import NAMESPACE_NAME_LABEL, Namespace
from kubus.core.settings import ConnectionSettings
from kubus.cycle import CycleOptions, CycleService
from kubus.framework.config import default_config
from kubus.framework.runtime import Framework
from kubus.plugins import in_tree_registry
from kubus.store import ClusterState

FAST = CycleOptions(lease_ttl=1.0, renew_interval=0.1, pop_wait_ms=50, request_timeout=1.0, backend="numpy")


async def test_the_table_follows_the_stored_namespaces(settings: ConnectionSettings, state: ClusterState) -> None:
    await state.put_namespace(Namespace("ml", {"team": "vision"}))
    await state.put_node(parse_node({"kind": "Node", "metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "1"}}}))
    registry = in_tree_registry()
    framework = Framework.from_profile(default_config(registry=registry).profiles[0], registry)
    # No queue answers its pops: the loop comes round every half second, reading what changed.
    service = CycleService(settings, framework, FAST)
    await service.start()
    try:

        def loaded() -> None:
            assert service.table is not None
            assert service.table.namespaces == {"ml": {"team": "vision", NAMESPACE_NAME_LABEL: "ml"}}

        await eventually(loaded)
        await state.put_namespace(Namespace("ml", {"team": "speech"}))
        await state.put_namespace(Namespace("web"))

        def refreshed() -> None:
            assert service.table is not None
            assert service.table.namespaces == {
                "ml": {"team": "speech", NAMESPACE_NAME_LABEL: "ml"},
                "web": {NAMESPACE_NAME_LABEL: "web"},
            }

        await eventually(refreshed)
    finally:
        await service.stop()
