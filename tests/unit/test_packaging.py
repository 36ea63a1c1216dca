"""The distribution ships every package, and the layering of the design holds."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def _package_dirs() -> dict[str, Path]:
    """Every folder with an __init__.py under the mapped roots, as its import name."""
    found: dict[str, Path] = {}
    for prefix, rel in SETUPTOOLS["package-dir"].items():
        base = ROOT / rel
        for init in base.rglob("__init__.py"):
            parts = init.parent.relative_to(base).parts
            if "__pycache__" in parts:
                continue
            name = ".".join((prefix, *parts))
            if name.startswith("kubus.") and any(
                name.startswith(p + ".") for p in SETUPTOOLS["package-dir"] if p != "kubus" and p != prefix
            ):
                continue
            found[name] = init.parent
    return found


def test_every_package_folder_is_listed_in_pyproject() -> None:
    listed = set(SETUPTOOLS["packages"])
    on_disk = set(_package_dirs())
    assert on_disk - listed == set(), "package folders missing from [tool.setuptools] packages"
    assert listed - on_disk == set(), "packages listed in pyproject.toml that have no folder"


def test_mypys_view_of_the_package_is_the_installed_layout() -> None:
    """.mypy-path/kubus holds, as symlinks, what the install maps: every entry of shared/ and every
    service folder under its import name (mypy cannot follow the editable install's hook)."""
    view = ROOT / ".mypy-path" / "kubus"
    want = {p.name: p.resolve() for p in (ROOT / "shared").iterdir() if p.name != "__pycache__"}
    for name, rel in SETUPTOOLS["package-dir"].items():
        if name.count(".") == 1:
            want[name.split(".")[1]] = (ROOT / rel).resolve()
    have = {p.name: p.resolve() for p in view.iterdir()}
    assert have == want


@pytest.mark.parametrize("package", sorted(SETUPTOOLS["packages"]))
def test_every_module_imports(package: str) -> None:
    pkg = importlib.import_module(package)
    for info in pkgutil.iter_modules(pkg.__path__, package + "."):
        importlib.import_module(info.name)


@pytest.mark.slow  # 40 s of the unit tests' 90: every module imported in a fresh set (`make check` skips it)
def test_every_module_imports_on_its_own() -> None:
    """Each module imports first, in a fresh set of kubus modules: no import cycle hides behind
    the order the test suite happens to import things in."""
    import sys

    names = [
        info.name
        for pkg in SETUPTOOLS["packages"]
        for info in pkgutil.iter_modules(importlib.import_module(pkg).__path__, pkg + ".")
    ]
    saved = {k: v for k, v in sys.modules.items() if k == "kubus" or k.startswith("kubus.")}
    failures = []
    try:
        for name in [*SETUPTOOLS["packages"], *names]:
            for k in [k for k in sys.modules if k == "kubus" or k.startswith("kubus.")]:
                del sys.modules[k]
            try:
                importlib.import_module(name)
            except Exception as e:  # the assertion below names every module that fails
                failures.append(f"{name}: {type(e).__name__}: {e}")
    finally:
        for k in [k for k in sys.modules if k == "kubus" or k.startswith("kubus.")]:
            del sys.modules[k]
        sys.modules.update(saved)
    assert failures == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


SERVICES = {"kubus.queue", "kubus.cycle", "kubus.binder", "kubus.gpu_agent"}


def _service_of(module: str) -> str | None:
    return next((s for s in SERVICES if module == s or module.startswith(s + ".")), None)


def test_shared_never_imports_a_service() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {m}"
        for path in (ROOT / "shared").rglob("*.py")
        for m in _imports(path)
        if _service_of(m)
    ]
    assert offenders == []


def test_services_never_import_each_other() -> None:
    offenders = []
    for service, rel in SETUPTOOLS["package-dir"].items():
        if service not in SERVICES:
            continue
        for path in (ROOT / rel).rglob("*.py"):
            for m in _imports(path):
                other = _service_of(m)
                if other and other != service:
                    offenders.append(f"{path.relative_to(ROOT)} imports {m}")
    assert offenders == []
