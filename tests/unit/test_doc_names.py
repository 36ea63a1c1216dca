"""Every code name the docs cite exists: each backticked dotted name ``kubus.x.y`` in README.md,
docs/*.md and bench/README.md resolves by import and getattr, and each backticked repository path
(``shared/api/gpus.py``, ``deploy/examples/pods.yaml``) is a file or folder of the repository. NATS
subjects (``kubus.pods.submit``), annotations (``kubus.io/gpus``) and patterns (``kubus.node.*``)
are not code names and are left out."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SUBJECT_ROOTS = frozenset({"pods", "node", "events", "bind", "reserved", "apiserver"})
"""The first part after ``kubus.`` of the bus subjects (kubus.bus.subjects), which are not modules."""
_DOTTED = re.compile(r"`(kubus(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
_PATH = re.compile(r"`((?:shared|services|deploy|docs|tests|bench)/[\w./-]*[\w/])`")


def _cited(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    return sorted({(doc.relative_to(REPO).as_posix(), m) for doc in DOCS for m in pattern.findall(doc.read_text())})


def resolve(name: str) -> object:
    """The object a dotted name names: the longest importable module prefix, then attributes.
    Raises ImportError or AttributeError."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


@pytest.mark.parametrize(("doc", "name"), _cited(_DOTTED))
def test_every_dotted_name_the_docs_cite_exists(doc: str, name: str) -> None:
    if name.split(".")[1] in SUBJECT_ROOTS:
        return  # a NATS subject
    try:
        resolve(name)
    except (ImportError, AttributeError) as e:
        pytest.fail(f"{doc} cites `{name}`, which does not exist: {e}")


_METHOD = re.compile(r"`([A-Z][A-Za-z0-9]+)\.([a-z_][A-Za-z0-9_]*)(?:\(\))?`")
_SOURCES = [p for top in ("shared", "services") for p in sorted((REPO / top).rglob("*.py"))]


def _module_of(path: Path) -> str:
    """The import name of a source file: shared/x/y.py is kubus.x.y, services/gpu-agent/z.py kubus.gpu_agent.z."""
    rel = path.relative_to(REPO).with_suffix("").parts
    head = ["kubus"] if rel[0] == "shared" else ["kubus", rel[1].replace("-", "_")]
    rest = rel[1:] if rel[0] == "shared" else rel[2:]
    return ".".join([*head, *(part for part in rest if part != "__init__")])


@pytest.mark.parametrize(("doc", "cited"), _cited(_METHOD))
def test_every_class_attribute_the_docs_cite_exists(doc: str, cited: tuple[str, str]) -> None:
    """``ClassName.method``: the class kubus defines has it (inherited included), or sets it as
    ``self.name`` in its module. Classes kubus does not define (asyncio's StreamWriter) are not
    checked."""
    cls_name, attr = cited
    defining = [p for p in _SOURCES if re.search(rf"^class {cls_name}\b", p.read_text(), re.M)]
    if not defining:
        return
    for path in defining:
        cls = getattr(importlib.import_module(_module_of(path)), cls_name)
        if hasattr(cls, attr) or attr in getattr(cls, "__dataclass_fields__", {}):
            return
        if re.search(rf"self\.{attr}\s*[:=]", path.read_text()):
            return
    pytest.fail(f"{doc} cites `{cls_name}.{attr}`, which does not exist")


@pytest.mark.parametrize(("doc", "path"), _cited(_PATH))
def test_every_repository_path_the_docs_cite_exists(doc: str, path: str) -> None:
    assert (REPO / path).exists(), f"{doc} cites `{path}`, which is not in the repository"


def test_the_docs_cite_some_names() -> None:
    assert len(_cited(_DOTTED)) > 20 and len(_cited(_PATH)) > 10
