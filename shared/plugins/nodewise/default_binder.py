"""DefaultBinder (Bind): binding is done by the binder service; this names the plugin only."""

from __future__ import annotations

from typing import Any, ClassVar


class DefaultBinder:
    name: ClassVar[str] = "DefaultBinder"

    def __init__(self, args: Any = None, handle: Any = None) -> None:
        pass
