"""deploy/Dockerfile, by inspection (no Docker engine here): a pinned base, a non-root user that the
chart and compose agree on, and a build context that holds what the build copies."""

from __future__ import annotations

import fnmatch
import re
import tomllib

import yaml
from deploy_support import CHART, DEPLOY, ROOT

DOCKERFILE = (DEPLOY / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _instructions(name: str) -> list[str]:
    """The arguments of every ``name`` instruction, continuation lines joined."""
    text = DOCKERFILE.replace("\\\n", " ")
    return [m.group(1).strip() for m in re.finditer(rf"^{name}\s+(.+)$", text, re.MULTILINE)]


def _ignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (a top-level name) out of the build context: the last
    matching pattern wins, ``!`` lets it back in."""
    ignored = False
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = line.strip()
        if pattern and not pattern.startswith("#") and fnmatch.fnmatch(path, pattern.removeprefix("!")):
            ignored = not pattern.startswith("!")
    return ignored


def test_base_image_is_pinned_by_version_and_digest() -> None:
    (base,) = [a for a in _instructions("ARG") if a.startswith("PYTHON_IMAGE=")]
    match = re.fullmatch(r"PYTHON_IMAGE=python:(\d+)\.(\d+)\.(\d+)-slim-bookworm@sha256:[0-9a-f]{64}", base)
    assert match, f"not pinned by full version and digest: {base}"
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert minimum and tuple(map(int, match.groups()[:2])) >= tuple(map(int, minimum.groups()))
    assert all(f.startswith("${PYTHON_IMAGE}") for f in _instructions("FROM"))


def test_runs_as_the_non_root_user_the_chart_and_compose_expect() -> None:
    (user,) = _instructions("USER")
    uid, gid = (int(x) for x in user.split(":"))
    assert uid > 0 and gid > 0
    pod = yaml.safe_load((CHART / "values.yaml").read_text())["podSecurityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (uid, gid)
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert compose["x-kubus"]["user"] == user


def test_build_context_holds_what_the_build_copies_and_nothing_big() -> None:
    sources = [src for args in _instructions("COPY") if "--from" not in args for src in args.split()[:-1]]
    assert sources, "no COPY"
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such file"
        assert not _ignored(source.rstrip("/")), f"COPY {source}: .dockerignore leaves it out of the context"
    for heavy in (".venv", ".git", ".kubus", "tests", "bench"):
        assert _ignored(heavy), f"{heavy} would be sent to every build"


def test_installs_the_extras_it_names_and_has_a_default_command() -> None:
    extras = set(PYPROJECT["project"]["optional-dependencies"])
    for extra in re.findall(r"kubus\[(\w+)\]|'\.\[(\w+)\]'", DOCKERFILE):
        assert set(filter(None, extra)) <= extras
    assert "nvml" in extras, "the gpu-agent reads NVML through the nvml extra"
    (cmd,) = _instructions("CMD")
    assert yaml.safe_load(cmd)[0] in PYPROJECT["project"]["scripts"]
