"""Fixtures of the deploy tests: the Helm engine, the Kubernetes schemas, the rendered chart.

The chart is rendered and linted by Helm's own Go code (``helm-python-sdk``), offline: the
NATS and Valkey subcharts are never downloaded (chart repositories are out of reach here), so
only kubus' own templates render. Without the engine the tests skip, visibly; under ``CI=true``
they fail, as a missing test server does.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest
from deploy_support import AGENT_NODE, VALUES_FILES, VALUES_IDS, AccessSecrets, Rendered, render_chart, values_of

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(module: str) -> ModuleType:
    """``module`` imported; a skip without it, a failure under CI=true."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        reason = f"{module} is not installed ({exc}); `pip install -e '.[dev]'` installs it"
        if IN_CI:
            pytest.fail(f"CI=true makes this a failure: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def helm() -> ModuleType:
    """``helm_python``: Helm's engine (Go, through ctypes)."""
    return require("helm_python")


@pytest.fixture(scope="session")
def kubernetes_validate() -> ModuleType:
    """``kubernetes_validate``: the Kubernetes API's JSON schemas, per Kubernetes version."""
    return require("kubernetes_validate")


@pytest.fixture(scope="module", params=VALUES_FILES, ids=VALUES_IDS)
def values_file(request: pytest.FixtureRequest) -> Path | None:
    """The chart's defaults (None), then each ci/*.yaml over them."""
    return request.param


@pytest.fixture(scope="module")
def rendered(helm: ModuleType, values_file: Path | None) -> Rendered:
    return render_chart(helm, values_of(values_file))


@pytest.fixture(scope="session")
def access_secrets(tmp_path_factory: pytest.TempPathFactory) -> AccessSecrets:
    """The Secrets ci/access-values.yaml names, as its comment makes them: ``kubus access init DIR
    --node <node>``, then kubus-access from all of DIR and kubus-node-agents from its agent files."""
    from kubus.access.credentials import ensure_credentials

    creds = ensure_credentials(tmp_path_factory.mktemp("access"), nodes=[AGENT_NODE])
    files = {p.name: p.read_text() for p in sorted(creds.directory.iterdir()) if p.is_file()}
    agents = {name: text for name, text in files.items() if name.startswith("agent-")}
    return AccessSecrets({"kubus-access": files, "kubus-node-agents": agents}, dict(creds.passwords))
