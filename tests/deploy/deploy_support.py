"""What the deploy tests share: the chart rendered, and a service's command line checked by the
service's own entry point.

A rendered container (Helm) or a compose service is a command, an environment and some mounted
files. `check_service_command` parses the command with that service's own argparse parser and then
builds the service as its ``__main__`` would — settings from the environment, the scheduler
configuration and profile, the node manifest, the in-cluster Kubernetes config of a pod that has
its ServiceAccount's token — up to the point where it would connect.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from kubus.binder import __main__ as binder_main
from kubus.core.settings import ENV_PREFIX
from kubus.cycle import __main__ as cycle_main
from kubus.gpu_agent import __main__ as agent_main
from kubus.kubeapi import load_config as load_kube_config
from kubus.kubeapi.config import SERVICE_ACCOUNT_DIR
from kubus.queue import __main__ as queue_main
from kubus.watcher import __main__ as watcher_main

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "kubus"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
VALUES_FILES: list[Path | None] = [None, *CI_VALUES]
VALUES_IDS = ["defaults", *(p.name for p in CI_VALUES)]
RELEASE = NAMESPACE = "kubus"
SERVICE_MODULES = ("kubus.queue", "kubus.cycle", "kubus.binder", "kubus.gpu_agent", "kubus.watcher")
_MAINS: dict[str, ModuleType] = {
    "kubus.queue": queue_main,
    "kubus.cycle": cycle_main,
    "kubus.binder": binder_main,
    "kubus.gpu_agent": agent_main,
    "kubus.watcher": watcher_main,
}
_KUBE_CLIENTS = (binder_main, watcher_main)
"""The entry points that find a Kubernetes cluster (`kubus.kubeapi.load_config`)."""
KUBELET_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
"""What the kubelet sets in every container, enableServiceLinks or not: where the apiserver is."""
AGENT_NODE = "gpu-node-1"
"""The node a DaemonSet pod lands on, as the downward API would say (``spec.nodeName``)."""
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def values_of(path: Path | None) -> dict[str, Any]:
    """The values a ``-f path`` adds to the chart's defaults (none for the defaults themselves)."""
    return {} if path is None else yaml.safe_load(path.read_text()) or {}


def mode_of(values: Mapping[str, Any]) -> str:
    """The mode (cluster or bus) the chart runs in with ``values`` over its defaults."""
    return str(values.get("mode") or yaml.safe_load((CHART / "values.yaml").read_text())["mode"])


@dataclass(frozen=True)
class Rendered:
    """The objects one rendering made (the chart's crds/ first, as ``helm install`` creates them
    and ``helm template --include-crds`` prints them), and its NOTES.txt."""

    objects: list[dict[str, Any]]
    notes: str

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in kinds]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
        return found[0]

    def workloads(self) -> list[dict[str, Any]]:
        return self.of_kind("Deployment", "DaemonSet")


@dataclass(frozen=True)
class AccessSecrets:
    """Secrets made from ``kubus access init`` output (name -> key -> text), and its passwords."""

    secrets: dict[str, dict[str, str]]
    passwords: dict[str, str]


def render_chart(helm: ModuleType, values: Mapping[str, Any] | None = None) -> Rendered:
    """The chart rendered with ``values`` over its defaults, as ``helm install`` would render it
    (values.schema.json checked first). Raises helm_python's HelmValuesError or HelmRenderError."""
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(dict(values or {}), name=RELEASE, namespace=NAMESPACE, is_install=True)
        crds = [crd["data"] for crd in chart.crds]
    objects: list[dict[str, Any]] = [doc for text in crds for doc in yaml.safe_load_all(text) if doc]
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
        else:
            objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return Rendered(objects, notes)


def pod_containers(workload: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for each container of a Deployment or DaemonSet."""
    spec = workload["spec"]["template"]["spec"]
    for container in spec["containers"]:
        yield spec, container


def materialize(
    rendered: Rendered,
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    root: Path,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Write the files ``container`` sees to ``root`` + their path in the container: those of the
    rendered ConfigMaps, those of the Secrets in ``secrets`` (name -> key -> text, what the
    user would have created), and the ServiceAccount's token, CA and namespace where the pod
    mounts them (automountServiceAccountToken), as the kubelet does. A key the volume asks for
    and the Secret lacks fails the test."""
    if pod_spec.get("automountServiceAccountToken") is True:
        import trustme

        account = root / SERVICE_ACCOUNT_DIR.relative_to("/")
        account.mkdir(parents=True, exist_ok=True)
        (account / "token").write_text("a-projected-service-account-token")
        (account / "ca.crt").write_bytes(trustme.CA().cert_pem.bytes())
        (account / "namespace").write_text(NAMESPACE)
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            source, data = volume["configMap"], rendered.get("ConfigMap", volume["configMap"]["name"])["data"]
        elif "secret" in volume and secrets and volume["secret"]["secretName"] in secrets:
            source, data = volume["secret"], secrets[volume["secret"]["secretName"]]
        else:
            continue
        items = source.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            assert item["key"] in data, f"volume {volume['name']}: no key {item['key']!r} in {sorted(data)}"
            (target / item["path"]).write_text(data[item["key"]])


def expand_references(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """``args`` as the kubelet runs them: ``$(VAR)`` replaced by the container's variable VAR
    when it has one (left as it is otherwise), ``$$`` by ``$``."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "$"
        return env.get(name, match.group(0))

    return [_REFERENCE.sub(replace, arg) for arg in args]


def container_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's environment: a placeholder for each Secret's value, a node for the downward API."""
    env = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in source:
            env[var["name"]] = f"secret-{source['secretKeyRef']['name']}-{source['secretKeyRef']['key']}"
        elif source.get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[var["name"]] = AGENT_NODE
        else:
            raise AssertionError(f"env {var['name']}: a source the deploy tests do not know: {var}")
    return env


def _local(arg: str, root: Path) -> str:
    """``arg`` with a container path (``/etc/...`` or ``--flag=/etc/...``) that exists under ``root``
    replaced by that file; anything else as it is."""
    flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
    if value.startswith("/") and (root / value[1:]).exists():
        return f"{flag}{eq}{root / value[1:]}"
    return arg


def check_service_command(
    command: Sequence[str], env: Mapping[str, str], root: Path, monkeypatch: pytest.MonkeyPatch
) -> argparse.Namespace:
    """Parse ``command`` (``python -m kubus.<service> ...``) and build its service with exactly
    ``env`` as the KUBUS_* environment and the container's files under ``root``; a service that
    finds a Kubernetes cluster finds it as it would in that container: no kubeconfig there, so
    the in-cluster config (`KUBELET_ENV`, the token under ``root``) or KubeConfigError. Returns
    the parsed flags; fails the test with the parser's own message, or raises what the service's
    build raises (ConfigError, SettingsError, ManifestError, KubeConfigError, ...)."""
    assert list(command[:2]) == ["python", "-m"], f"not a `python -m` command: {command}"
    module = command[2]
    assert module in SERVICE_MODULES, f"{module}: not a kubus service (one of {SERVICE_MODULES})"
    argv = [_local(arg, root) for arg in command[3:]]
    for var in [v for v in os.environ if v.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(var)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    in_the_container = functools.partial(
        load_kube_config,
        environ={**env, **KUBELET_ENV},
        home=root / "home",
        service_account_dir=root / SERVICE_ACCOUNT_DIR.relative_to("/"),
    )
    for entry_point in _KUBE_CLIENTS:
        monkeypatch.setattr(entry_point, "load_kube_config", in_the_container)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            main = _MAINS[module]
            args: argparse.Namespace = main.parse_args(argv)
            main.build(args)
    except SystemExit:
        pytest.fail(f"{' '.join(command)}: {stderr.getvalue().strip()}", pytrace=False)
    assert 0 < args.metrics_port < 65536, f"{' '.join(command)}: no --metrics-port, so no probes to answer"
    return args
