"""The Helm chart, rendered offline by Helm's own engine, for its defaults and every ci/*.yaml:
lint-clean, valid Kubernetes objects, hardened and probed containers, and commands that kubus'
own entry points accept with the configuration the chart mounts."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from deploy_support import (
    AGENT_NODE,
    CHART,
    ROOT,
    VALUES_FILES,
    VALUES_IDS,
    AccessSecrets,
    Rendered,
    check_service_command,
    container_env,
    expand_references,
    materialize,
    pod_containers,
    render_chart,
    values_of,
)

from kubus.framework.config import load_config
from kubus.plugins import in_tree_registry

# Where kube-scheduler's API stops being older than the chart's kubeVersion, and the newest the
# schema package knows: every object must be valid for both.
KUBE_VERSIONS = ("1.30.0", "latest")
# The one lint finding an offline machine cannot avoid: `helm dependency update` fetches them.
MISSING_DEPENDENCIES = "chart directory is missing these dependencies: nats,valkey"
SELECTOR_KEYS = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "kubus.io/profile",
}


def test_chart_metadata_matches_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project["version"], "appVersion is the kubus release the image holds"
    deps = {d["name"]: d for d in chart["dependencies"]}
    assert deps["nats"]["condition"] == "nats.enabled"
    assert deps["nats"]["repository"] == "https://nats-io.github.io/k8s/helm/charts/"
    assert deps["valkey"]["condition"] == "valkey.enabled"


@pytest.mark.parametrize("values_file", VALUES_FILES, ids=VALUES_IDS)
def test_lint_strict_finds_nothing(helm: ModuleType, values_file: Path | None) -> None:
    report = helm.lint(CHART, values_of(values_file), strict=True, kube_version="v1.30.0")
    findings = [m for m in report["messages"] if m["severity"] >= 2 and m["error"] != MISSING_DEPENDENCIES]
    assert findings == []


def check_valid_kubernetes(rendered: Rendered, kubernetes_validate: ModuleType) -> None:
    """Every object valid for each of KUBE_VERSIONS, and no two with one kind and name."""
    versions = [kubernetes_validate.latest_version() if v == "latest" else v for v in KUBE_VERSIONS]
    for obj in rendered.objects:
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # a CRD: no schema in the Kubernetes API; test_metrics_are_scraped checks it
        for version in versions:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.path)
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} (Kubernetes {version}) {where}: {exc.message}")
    names = [(o["kind"], o["metadata"]["name"]) for o in rendered.objects]
    assert len(names) == len(set(names)), "two objects with one kind and name"


def test_rendered_objects_are_valid_kubernetes(rendered: Rendered, kubernetes_validate: ModuleType) -> None:
    check_valid_kubernetes(rendered, kubernetes_validate)


def test_every_container_is_hardened_probed_and_bounded(rendered: Rendered) -> None:
    for workload in rendered.workloads():
        for spec, container in pod_containers(workload):
            where = f"{workload['kind']}/{workload['metadata']['name']}"
            pod_security = spec["securityContext"]
            assert pod_security["runAsNonRoot"] is True and pod_security["runAsUser"] > 0, where
            assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}, where
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            assert spec["automountServiceAccountToken"] is False, where
            assert spec["enableServiceLinks"] is False, where
            assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", where
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", where
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), where
            assert "memory" in container["resources"]["limits"], where


def test_commands_are_what_the_services_accept(
    rendered: Rendered, access_secrets: AccessSecrets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each container's command parses with its service's parser, and the service builds from the
    mounted configuration, profile, node manifest, settings file and the environment's settings."""
    for i, workload in enumerate(rendered.workloads()):
        for spec, container in pod_containers(workload):
            root = tmp_path / str(i)
            materialize(rendered, spec, container, root, access_secrets.secrets)
            env = container_env(container)
            command = expand_references([*container["command"], *container["args"]], env)
            args = check_service_command(command, env, root, monkeypatch)
            assert args.metrics_port == container["ports"][0]["containerPort"], "the probes ask another port"


def test_one_cycle_deployment_per_profile(rendered: Rendered, values_file: Path | None) -> None:
    config = yaml.safe_load(rendered.get("ConfigMap", "kubus-scheduler-config")["data"]["scheduler-config.yaml"])
    loaded = load_config(config, registry=in_tree_registry())
    profiles = [p.scheduler_name for p in loaded.profiles]
    cycles = {d["metadata"]["labels"]["kubus.io/profile"]: d for d in rendered.of_kind("Deployment")
              if d["metadata"]["labels"]["app.kubernetes.io/component"] == "cycle"}  # fmt: skip
    assert sorted(cycles) == sorted(profiles)
    values = values_of(values_file).get("cycle", {})
    for name, deployment in cycles.items():
        replicas = values.get("overrides", {}).get(name, {}).get("replicas", values.get("replicas", 2))
        assert deployment["spec"]["replicas"] == replicas
        assert f"--profile={name}" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_selectors_hold_only_labels_that_never_change(rendered: Rendered) -> None:
    for obj in rendered.of_kind("Deployment", "DaemonSet", "PodDisruptionBudget"):
        selector = obj["spec"]["selector"]["matchLabels"]
        assert selector.keys() <= SELECTOR_KEYS, f"{obj['kind']}/{obj['metadata']['name']}: {selector}"
    for workload in rendered.workloads():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_metrics_are_scraped(rendered: Rendered) -> None:
    pods = [w["spec"]["template"] for w in rendered.workloads()]
    services = rendered.of_kind("Service")
    assert {s["metadata"]["labels"]["app.kubernetes.io/component"] for s in services} == {
        w["metadata"]["labels"]["app.kubernetes.io/component"] for w in rendered.workloads()
    }
    for service in services:
        selected = [p for p in pods if service["spec"]["selector"].items() <= p["metadata"]["labels"].items()]
        assert selected, f"Service/{service['metadata']['name']} selects no pod"
        assert all(c["ports"][0]["name"] == service["spec"]["ports"][0]["targetPort"]
                   for p in selected for c in p["spec"]["containers"])  # fmt: skip
    for monitor in rendered.of_kind("ServiceMonitor"):
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        match = monitor["spec"]["selector"]["matchLabels"]
        assert all(match.items() <= s["metadata"]["labels"].items() for s in services)
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_connection_secrets_reach_the_settings_as_files_and_variables(helm: ModuleType) -> None:
    values = values_of(CHART / "ci" / "external-servers-values.yaml")
    rendered = render_chart(helm, values)
    for workload in rendered.workloads():
        for spec, container in pod_containers(workload):
            env = container_env(container)
            assert env["KUBUS_NATS_URL"] == values["externalNats"]["url"]
            assert env["KUBUS_REDIS_URL"] == values["externalRedis"]["url"]
            assert env["KUBUS_REDIS_PASSWORD"] == "secret-kubus-redis-auth-password"
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
            for var, secret in [
                ("KUBUS_NATS_CREDS", "kubus-nats-auth"),
                ("KUBUS_NATS_TLS_CA", "kubus-nats-tls"),
                ("KUBUS_NATS_TLS_CERT", "kubus-nats-tls"),
                ("KUBUS_NATS_TLS_KEY", "kubus-nats-tls"),
                ("KUBUS_REDIS_TLS_CA", "kubus-redis-tls"),
            ]:
                directory = str(Path(env[var]).parent)
                assert secrets[mounts[directory]] == secret, f"{var}={env[var]} is not in Secret {secret}"
            assert "KUBUS_REDIS_TLS_CERT" not in env, "no client certificate was asked for"


ACCESS = {"existingSecret": "kubus-access", "nodeAgentsSecret": "kubus-node-agents"}
ACCESS_DIR = "/etc/kubus/access"
# Variables that carry a login: with access, only the settings file does.
LOGIN_VARS = {"KUBUS_NATS_USER", "KUBUS_NATS_PASSWORD", "KUBUS_NATS_TOKEN", "KUBUS_NATS_CREDS",
              "KUBUS_REDIS_USERNAME", "KUBUS_REDIS_PASSWORD"}  # fmt: skip


@pytest.mark.parametrize("mode", ["node", "simulate"])
def test_access_gives_each_service_its_own_login_file(
    helm: ModuleType,
    kubernetes_validate: ModuleType,
    access_secrets: AccessSecrets,
    mode: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """access.existingSecret: every container runs with --settings naming its role's file, the one
    file of the Secret its pod mounts (read-only, mode 0400); a node's agent gets the node agents'
    Secret and picks agent-<node>.yaml by $(NODE_NAME). The file logs the service in as its role,
    and no password or login variable is anywhere in what the chart renders."""
    rendered = render_chart(helm, {"access": ACCESS, "gpuAgent": {"mode": mode}})
    node_agent = "agent-$(NODE_NAME)"
    roles = {"queue": "queue", "cycle": "cycle", "binder": "binder",
             "gpu-agent": "gpu-agent" if mode == "simulate" else node_agent}  # fmt: skip
    seen = set()
    for i, workload in enumerate(rendered.workloads()):
        component = workload["metadata"]["labels"]["app.kubernetes.io/component"]
        role = roles[component]
        seen.add(component)
        for spec, container in pod_containers(workload):
            where = f"{workload['kind']}/{workload['metadata']['name']}"
            settings = [a for a in container["args"] if a.startswith("--settings")]
            assert settings == [f"--settings={ACCESS_DIR}/{role}.yaml"], where
            mounts = [m for m in container["volumeMounts"] if m["mountPath"] == ACCESS_DIR]
            assert mounts == [{"name": "access", "mountPath": ACCESS_DIR, "readOnly": True}], where
            (volume,) = [v for v in spec["volumes"] if v["name"] == "access"]
            if role == node_agent:
                expected = {"secretName": "kubus-node-agents", "defaultMode": 0o400}
            else:
                item = {"key": f"{role}.yaml", "path": f"{role}.yaml"}
                expected = {"secretName": "kubus-access", "defaultMode": 0o400, "items": [item]}
            assert volume == {"name": "access", "secret": expected}, where
            env = container_env(container)
            assert not LOGIN_VARS & env.keys(), f"{where}: a login outside the settings file"

            root = tmp_path / str(i)
            materialize(rendered, spec, container, root, access_secrets.secrets)
            command = expand_references([*container["command"], *container["args"]], env)
            args = check_service_command(command, env, root, monkeypatch)
            login = yaml.safe_load(Path(args.settings).read_text())
            user = f"agent-{AGENT_NODE}" if role == node_agent else role
            assert login["nats_user"] == login["redis_username"] == user, where
    assert seen == set(roles), "a kubus service without a workload"
    assert not rendered.of_kind("Secret"), "the chart makes no Secret: the logins are the user's"
    text = yaml.safe_dump_all(rendered.objects) + rendered.notes
    leaked = [user for user, password in access_secrets.passwords.items() if password in text]
    assert leaked == [], f"passwords of {leaked} in the rendered manifests"
    check_valid_kubernetes(rendered, kubernetes_validate)


def test_access_notes_say_whether_the_bundled_servers_know_the_users(helm: ModuleType) -> None:
    bare = render_chart(helm, {"access": ACCESS}).notes
    assert "WARNING: the bundled NATS loads no users" in bare
    assert "WARNING: the bundled Valkey loads no users.acl" in bare
    assert "--settings DIR/client.yaml" in bare
    wired = render_chart(helm, values_of(CHART / "ci" / "access-values.yaml")).notes
    assert "WARNING" not in wired
    assert "includes ../kubus-access/nats.conf" in wired
    assert "WARNING" not in render_chart(helm, {}).notes and "Logins:" not in render_chart(helm, {}).notes


def test_access_values_mount_one_file_of_the_secret_into_the_bundled_servers() -> None:
    """ci/access-values.yaml, the documented wiring of the bundled NATS (chart 1.x: config.merge,
    container.patch, podTemplate.patch) and Valkey (extraVolumes, extraVolumeMounts, aclfile): the
    include and the aclfile name the files that the volumes mount from the access Secret."""
    values = values_of(CHART / "ci" / "access-values.yaml")
    secret = values["access"]["existingSecret"]
    nats = values["nats"]
    (mount,) = [p["value"] for p in nats["container"]["patch"] if p["path"] == "/volumeMounts/-"]
    (volume,) = [p["value"] for p in nats["podTemplate"]["patch"] if p["path"] == "/spec/volumes/-"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    assert volume["secret"]["secretName"] == secret
    assert volume["secret"]["items"] == [{"key": "nats.conf", "path": "nats.conf"}]
    included = Path("/etc/nats-config") / nats["config"]["merge"]["$include"]
    assert included.resolve() == Path(mount["mountPath"]) / "nats.conf"
    valkey = values["valkey"]
    (volume,) = valkey["extraVolumes"]
    (mount,) = valkey["extraVolumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    assert volume["secret"]["secretName"] == secret
    assert volume["secret"]["items"] == [{"key": "users.acl", "path": "users.acl"}]
    assert f"aclfile {mount['mountPath']}/users.acl" in valkey["valkeyConfig"].splitlines()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["valkey"]["valkeyConfig"].splitlines()
    assert set(defaults) <= set(valkey["valkeyConfig"].splitlines()), "the chart's own Valkey settings are kept"


BAD_VALUES = [
    ({"replicaCount": 3}, "replicaCount"),
    ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"image": {"digest": "latest"}}, "digest"),
    ({"binder": {"replicas": "two"}}, "replicas"),
    ({"cycle": {"replicas": 0}}, "replicas"),
    ({"cycle": {"backend": "tpu"}}, "backend"),
    ({"cycle": {"resources": {"limits": {"memory": "lots"}}}}, "memory"),
    ({"logLevel": "verbose"}, "logLevel"),
    ({"gpuAgent": {"mode": "gpu"}}, "mode"),
    ({"metrics": {"port": 80}}, "port"),
    ({"schedulerConfig": {"profiles": []}}, "profiles"),
    ({"schedulerConfig": {"profiles": [{"schedulerName": "GPU_Jobs"}]}}, "schedulerName"),
    ({"schedulerConfig": {"profiles": [{"schedulerName": "a"}, {"schedulerName": "a"}]}}, "appears twice"),
    ({"cycle": {"overrides": {"gpu-pack": {"batchSize": 64}}}}, "cycle.overrides.gpu-pack"),
    ({"nats": {"enabled": False}}, "externalNats.url: required"),
    ({"valkey": {"enabled": False}}, "externalRedis.url: required"),
    ({"externalNats": {"url": "nats://elsewhere:4222"}}, "set nats.enabled=false"),
    ({"valkey": {"enabled": False}, "externalRedis": {"url": "http://redis:6379"}}, "url"),
    ({"tls": {"redis": {"existingSecret": "redis-tls"}}}, "rediss://"),
    ({"tls": {"nats": {"existingSecret": "nats-tls", "certKey": "tls.crt"}}}, "set both"),
    ({"auth": {"redis": {"passwordKey": "password"}}}, "auth.redis.passwordKey: needs auth.redis.existingSecret"),
    ({"serviceAccount": {"create": False}}, "serviceAccount.name"),
    ({"access": ACCESS, "auth": {"nats": {"existingSecret": "nats-auth"}}}, "access.existingSecret and auth.nats"),
    ({"access": ACCESS, "auth": {"redis": {"existingSecret": "redis-auth"}}}, "access.existingSecret and auth.redis"),
    ({"access": {"existingSecret": "kubus-access"}}, "access.nodeAgentsSecret: required"),
    ({"access": {"nodeAgentsSecret": "kubus-node-agents"}}, "access.nodeAgentsSecret: needs access.existingSecret"),
    ({"access": {"existingSecret": "Kubus_Access"}}, "existingSecret"),
    ({"access": {"secret": "kubus-access"}}, "secret"),
    ({"access": ACCESS, "podSecurityContext": {"fsGroup": None}}, "podSecurityContext.fsGroup"),
]


@pytest.mark.parametrize(("values", "expected"), BAD_VALUES, ids=[json.dumps(v) for v, _ in BAD_VALUES])
def test_wrong_values_fail_the_install(helm: ModuleType, values: dict[str, Any], expected: str) -> None:
    with pytest.raises(helm.HelmError) as failure:
        render_chart(helm, values)
    assert expected in str(failure.value)


def _undocumented(values: Any, schema: dict[str, Any], defs: dict[str, Any], path: str) -> list[str]:
    """Keys of ``values`` without a description in ``schema``, in every object whose keys the schema
    closes (the subcharts' values and the scheduler configuration are open: others document them)."""
    if "$ref" in schema:
        schema = {**defs[schema["$ref"].rsplit("/", 1)[1]], **schema}
    if not isinstance(values, dict) or schema.get("additionalProperties") is not False:
        return []
    missing = []
    for key, value in values.items():
        child = schema["properties"].get(key, {})
        if "description" not in child:
            missing.append(f"{path}{key}")
        missing += _undocumented(value, child, defs, f"{path}{key}.")
    return missing


def test_every_value_is_in_the_schema_with_a_description() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert _undocumented(values, schema, schema["definitions"], "") == []
