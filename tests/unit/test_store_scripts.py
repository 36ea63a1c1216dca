"""The Lua scripts ship as `.lua` files: every one is read and registered, none is left over, and
each opens with its contract."""

from __future__ import annotations

from importlib.resources import files
from typing import Any

from kubus.store import scripts

LUA = files("kubus.store") / "lua"
FILES = {f.name.removesuffix(".lua"): f.read_text(encoding="utf-8") for f in LUA.iterdir() if f.name.endswith(".lua")}


class _Recorder:
    """Stands in for redis.asyncio.Redis: keeps what `register_script` is given."""

    def __init__(self) -> None:
        self.registered: list[str] = []

    def register_script(self, text: str) -> Any:
        self.registered.append(text)
        return text


def _registered() -> list[str]:
    rec = _Recorder()
    scripts.Scripts(rec)
    return rec.registered


def test_every_script_file_is_one_registered_script() -> None:
    registered = _registered()
    own = [name for name in FILES if not name.startswith("_")]
    assert len(registered) == len(set(registered)) == len(own)
    for name in own:
        assert getattr(scripts, name.upper()) in registered, f"{name}.lua is not registered"
        assert sum(FILES[name] in text for text in registered) == 1, name


def test_every_library_file_is_used() -> None:
    registered = _registered()
    for name, text in FILES.items():
        if name.startswith("_"):
            assert any(text in script for script in registered), f"{name}.lua is in no registered script"


def test_no_script_constant_without_its_file() -> None:
    constants = {
        n
        for n, v in vars(scripts).items()
        if n.isupper() and not n.startswith("_") and isinstance(v, str) and "redis.call" in v
    }
    assert {n.lower() for n in constants} == {n for n in FILES if not n.startswith("_")}


def test_each_file_opens_with_its_contract() -> None:
    for name, text in FILES.items():
        head = []
        for line in text.splitlines():
            if not line.startswith("--"):
                break
            head.append(line)
        assert 2 <= len(head) <= 5, f"{name}.lua: a contract comment of 2 to 5 lines first"
        if name.startswith("_"):
            assert head[0].startswith("-- Library"), name
        else:
            contract = "\n".join(head)
            assert head[0].startswith(f"-- {name.upper()}"), f"{name}.lua: the contract names the script"
            for part in ("KEYS", "ARGV", "Reply"):
                assert part in contract, f"{name}.lua: its contract says nothing of {part}"
