"""Every module of the package has its place in [tool.importlinter]'s contracts (`lint-imports`
checks the imports; this checks that nothing is left out of what it checks)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = {c["id"]: c for c in PYPROJECT["tool"]["importlinter"]["contracts"]}
SERVICES = {name for name, rel in PYPROJECT["tool"]["setuptools"]["package-dir"].items() if rel.startswith("services/")}


def _top_level() -> set[str]:
    """kubus.X for every module and package of the installed layout (.mypy-path/kubus)."""
    names = set()
    for entry in (ROOT / ".mypy-path" / "kubus").iterdir():
        if entry.name == "__init__.py" or not (entry.suffix == ".py" or (entry / "__init__.py").exists()):
            continue
        names.add("kubus." + entry.name.removesuffix(".py"))
    return names


def test_every_module_has_a_layer() -> None:
    layered = {m.strip() for layer in CONTRACTS["layers"]["layers"] for m in re.split(r"[|:]", layer)}
    assert {".".join(m.split(".")[:2]) for m in layered} == _top_level()
    # A package whose modules sit in layers of their own (kubus.core) names every one of them.
    for package in {".".join(m.split(".")[:2]) for m in layered if m.count(".") > 1}:
        folder = ROOT / ".mypy-path" / Path(*package.split("."))
        modules = {f"{package}.{f.stem}" for f in folder.glob("*.py") if f.name != "__init__.py"}
        assert modules == {m for m in layered if m.startswith(package + ".")}, package


def test_the_services_are_the_independent_ones() -> None:
    assert set(CONTRACTS["services"]["modules"]) == SERVICES
    assert set(CONTRACTS["shared"]["forbidden_modules"]) == SERVICES


def test_every_shared_module_is_forbidden_the_services() -> None:
    assert set(CONTRACTS["shared"]["source_modules"]) == _top_level() - SERVICES
