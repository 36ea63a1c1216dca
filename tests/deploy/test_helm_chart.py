"""The Helm chart, rendered offline by Helm's own engine, for its defaults and every ci/*.yaml:
lint-clean, valid Kubernetes objects (its CRD included), hardened and probed containers, commands
that kubus' own entry points accept with the configuration the chart mounts, and in each mode what
it installs: in cluster mode (the default) the watcher, binders binding through the API and the
ClusterRole of exactly the calls kubus makes; in bus mode the gpu-agents and no API access."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml
from deploy_support import (
    AGENT_NODE,
    CHART,
    NAMESPACE,
    ROOT,
    VALUES_FILES,
    VALUES_IDS,
    AccessSecrets,
    Rendered,
    check_service_command,
    container_env,
    expand_references,
    materialize,
    mode_of,
    pod_containers,
    render_chart,
    values_of,
)

from kubus.api.manifests import parse_object
from kubus.api.podgroups import PodGroup
from kubus.framework.config import load_config
from kubus.kubeapi import EVENTS, NODES, POD_GROUPS, PODS
from kubus.plugins import in_tree_registry
from kubus.watcher.objects import mirrored

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
API_CALLERS = {"watcher", "binder"}
"""The components that call the Kubernetes API in cluster mode (and get the ServiceAccount's token)."""
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


def component(workload: dict[str, Any]) -> str:
    return str(workload["metadata"]["labels"]["app.kubernetes.io/component"])


def kubus_api_calls() -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every call kubus makes to the Kubernetes API in cluster mode,
    from its own tables: the watcher lists (check_access, its reflectors) and watches what it
    mirrors; the binder gets a pod back after a 409 and while a preemption's victim remains."""
    watched = (NODES, PODS, *mirrored().values())
    reads = {(r.group, r.plural, verb) for r in watched for verb in ("list", "watch")}
    writes = {
        ("", "pods", "get"),  # the binder: ApiBinding after a 409, a victim still there
        ("", "pods", "delete"),  # the watcher: a preemption's victim
        ("", "pods/binding", "create"),  # the binder: KubeClient.bind
        ("", "pods/status", "patch"),  # the watcher: PodScheduled, DisruptionTarget, nominatedNodeName
        (EVENTS.group, EVENTS.plural, "create"),  # the watcher: FailedScheduling, Scheduled, Preempted
        (EVENTS.group, EVENTS.plural, "patch"),  # the watcher: a repeat counted in the event's series
    }
    return reads | writes


def granted(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) each rule of a ClusterRole grants."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
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


def test_every_container_is_hardened_probed_and_bounded(rendered: Rendered, values_file: Path | None) -> None:
    cluster = mode_of(values_of(values_file)) == "cluster"
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
            # The token only where the Kubernetes API is called.
            assert spec["automountServiceAccountToken"] is (cluster and component(workload) in API_CALLERS), where
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
    # kubus' own metrics Services (valkeyHA's headless Services name its servers' pods instead).
    services = [s for s in rendered.of_kind("Service") if s["metadata"]["labels"].get("kubus.io/metrics") == "true"]
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


@pytest.mark.parametrize("mode", ["cluster", "bus"])
def test_connection_secrets_reach_the_settings_as_files_and_variables(helm: ModuleType, mode: str) -> None:
    values = {**values_of(CHART / "ci" / "external-servers-values.yaml"), "mode": mode}
    rendered = render_chart(helm, values)
    assert {component(w) for w in rendered.workloads()} >= {"watcher" if mode == "cluster" else "gpu-agent"}
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


def test_the_pods_that_call_the_api_and_only_they_have_the_cluster_role(
    rendered: Rendered, values_file: Path | None
) -> None:
    """Cluster mode: one ClusterRole, bound to the ServiceAccount every kubus pod runs as (created
    or existing), whose token only the watcher's and binders' pods mount. Bus mode: no RBAC object,
    no token anywhere."""
    accounts = {w["spec"]["template"]["spec"]["serviceAccountName"] for w in rendered.workloads()}
    assert len(accounts) == 1, accounts
    (account,) = accounts
    pods = {component(w): w["spec"]["template"]["spec"] for w in rendered.workloads()}
    with_token = {name for name, spec in pods.items() if spec["automountServiceAccountToken"]}
    if mode_of(values_of(values_file)) == "bus":
        assert rendered.of_kind(*RBAC_KINDS) == []
        assert with_token == set()
        return
    assert with_token == API_CALLERS
    assert rendered.of_kind("Role", "RoleBinding") == []
    (role,) = rendered.of_kind("ClusterRole")
    (binding,) = rendered.of_kind("ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    created = rendered.of_kind("ServiceAccount")
    assert [a["metadata"]["name"] for a in created] in ([account], []), "the bound account is the pods' own"


def test_the_cluster_role_grants_exactly_the_calls_kubus_makes(helm: ModuleType) -> None:
    """Every (group, resource, verb) the ClusterRole grants is one kubus calls, and every call is
    granted: no wildcard, no resourceNames or non-resource URLs, nothing kubus does not do
    (tests/integration/test_rbac.py proves the same against a real apiserver)."""
    (role,) = render_chart(helm, {}).of_kind("ClusterRole")
    for rule in role["rules"]:
        assert rule.keys() == {"apiGroups", "resources", "verbs"}, rule
        assert "*" not in [*rule["apiGroups"], *rule["resources"], *rule["verbs"]], rule
    assert granted(role) == kubus_api_calls()


def test_cluster_mode_installs_a_scheduler_of_this_cluster(helm: ModuleType) -> None:
    """The defaults: the watcher (one, Recreate, the scheduler configuration, no kubeconfig: the
    in-cluster account), binders binding through the API, no gpu-agent, profiles that leave
    default-scheduler to the cluster's kube-scheduler."""
    rendered = render_chart(helm, {})
    workloads = rendered.workloads()
    assert sorted({component(w) for w in workloads}) == ["binder", "cycle", "queue", "watcher"]
    assert rendered.of_kind("DaemonSet") == []
    assert all(component(o) != "gpu-agent" for o in rendered.objects if "labels" in o["metadata"]
               and "app.kubernetes.io/component" in o["metadata"]["labels"])  # fmt: skip

    watcher = rendered.get("Deployment", "kubus-watcher")
    assert watcher["spec"]["replicas"] == 1
    assert watcher["spec"]["strategy"] == {"type": "Recreate"}
    spec = watcher["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["python", "-m", "kubus.watcher"]
    assert container["args"] == ["--config=/etc/kubus/config/scheduler-config.yaml", "--metrics-port=9090",
                                 "--log-level=info"]  # fmt: skip
    volumes = {v["name"]: v for v in spec["volumes"]}
    (config,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/etc/kubus/config"]
    assert volumes[config["name"]]["configMap"]["name"] == "kubus-scheduler-config"
    assert "and the watcher, with ClusterRole kubus-kubus for ServiceAccount kubus" in rendered.notes

    binder = rendered.get("Deployment", "kubus-binder")
    (container,) = binder["spec"]["template"]["spec"]["containers"]
    assert "--apiserver" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--kubeconfig")]

    config = yaml.safe_load(rendered.get("ConfigMap", "kubus-scheduler-config")["data"]["scheduler-config.yaml"])
    profiles = [p["schedulerName"] for p in config["profiles"]]
    assert profiles == ["kubus", "gpu-binpack"], "default-scheduler is the cluster's kube-scheduler's"
    assert "schedulerName is kubus or gpu-binpack" in rendered.notes


def test_cluster_mode_warns_of_the_gpu_agent_values_it_ignores(helm: ModuleType) -> None:
    """Never silent: cluster mode runs no gpu-agent, so a simulation or node agents' Secret asked
    for there is named in the notes as ignored, and nothing of the agent is rendered."""
    plain = render_chart(helm, {})
    assert "WARNING" not in plain.notes
    access = {"existingSecret": "a", "nodeAgentsSecret": "agents"}
    asked = render_chart(helm, {"gpuAgent": {"mode": "simulate"}, "access": access})
    assert "gpuAgent.mode simulate and access.nodeAgentsSecret agents\nare ignored" in asked.notes
    assert "gpu-agent" not in {component(w) for w in asked.workloads()}
    bus = render_chart(helm, {"mode": "bus", "gpuAgent": {"mode": "simulate"}})
    assert "cluster mode runs no gpu-agent" not in bus.notes


def test_the_watcher_takes_its_values_as_the_other_components(helm: ModuleType) -> None:
    values = {
        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "2Gi"}},
        "podAnnotations": {"team": "scheduling"},
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}},
        "extraArgs": ["--kube-qps=100", "--kube-burst=200"],
    }  # fmt: skip
    watcher = render_chart(helm, {"watcher": values}).get("Deployment", "kubus-watcher")
    template = watcher["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert container["resources"] == values["resources"]
    assert template["metadata"]["annotations"]["team"] == "scheduling"
    assert "checksum/scheduler-config" in template["metadata"]["annotations"]
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert template["spec"][key] == values[key], key
    assert container["args"][-2:] == values["extraArgs"]


def test_bus_mode_renders_as_before(helm: ModuleType) -> None:
    """ci/bus-values.yaml: the queue, cycles (default-scheduler among them), binders that bind in
    the store only, a gpu-agent on every GPU node; no watcher, no RBAC, no token."""
    rendered = render_chart(helm, values_of(CHART / "ci" / "bus-values.yaml"))
    assert sorted({component(w) for w in rendered.workloads()}) == ["binder", "cycle", "gpu-agent", "queue"]
    assert rendered.get("DaemonSet", "kubus-gpu-agent")
    assert rendered.of_kind(*RBAC_KINDS) == []
    assert not [w for w in rendered.workloads() if w["spec"]["template"]["spec"]["automountServiceAccountToken"]]
    binder = rendered.get("Deployment", "kubus-binder")
    (container,) = binder["spec"]["template"]["spec"]["containers"]
    assert "--apiserver" not in container["args"]
    config = yaml.safe_load(rendered.get("ConfigMap", "kubus-scheduler-config")["data"]["scheduler-config.yaml"])
    assert [p["schedulerName"] for p in config["profiles"]] == ["default-scheduler", "gpu-binpack"]
    assert "kubus apply -f pods.yaml" in rendered.notes and "in bus mode" in rendered.notes
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["schedulerConfig"]["profiles"]
    assert config["profiles"][1:] == defaults[1:], "ci/bus-values.yaml keeps the chart's gpu-binpack profile"


POD_GROUP = {
    "apiVersion": f"{POD_GROUPS.group}/{POD_GROUPS.version}",
    "kind": "PodGroup",
    "metadata": {"name": "train", "namespace": "ml", "creationTimestamp": "2024-05-01T12:00:00Z"},
    "spec": {"minMember": 4, "minResources": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 4},
             "scheduleTimeoutSeconds": 30},
    "status": {"phase": "Pending", "running": 0},
}  # fmt: skip


def test_the_pod_group_crd_serves_what_the_watcher_reads(rendered: Rendered) -> None:
    """crds/podgroups.yaml (Helm creates it before the templates; test_rendered_objects_are_valid_
    kubernetes validates it as a CustomResourceDefinition): the group, version and plural the
    watcher watches and the ClusterRole grants, and its schema takes a PodGroup that kubus reads."""
    (crd,) = rendered.of_kind("CustomResourceDefinition")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{POD_GROUPS.plural}.{POD_GROUPS.group}"
    assert (spec["group"], spec["names"]["plural"], spec["names"]["kind"]) == (
        POD_GROUPS.group, POD_GROUPS.plural, POD_GROUPS.kind)  # fmt: skip
    assert spec["scope"] == ("Namespaced" if POD_GROUPS.namespaced else "Cluster")
    (version,) = [v for v in spec["versions"] if v["name"] == POD_GROUPS.version]
    assert version["served"] is True and version["storage"] is True
    jsonschema.validate(POD_GROUP, version["schema"]["openAPIV3Schema"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**POD_GROUP, "spec": {"minMember": "four"}}, version["schema"]["openAPIV3Schema"])
    group = parse_object(POD_GROUP)
    assert isinstance(group, PodGroup) and group.min_member == 4 and group.schedule_timeout_seconds == 30


ACCESS = {"existingSecret": "kubus-access", "nodeAgentsSecret": "kubus-node-agents"}
ACCESS_DIR = "/etc/kubus/access"
# Variables that carry a login: with access, only the settings file does.
LOGIN_VARS = {"KUBUS_NATS_USER", "KUBUS_NATS_PASSWORD", "KUBUS_NATS_TOKEN", "KUBUS_NATS_CREDS",
              "KUBUS_REDIS_USERNAME", "KUBUS_REDIS_PASSWORD"}  # fmt: skip


@pytest.mark.parametrize(("mode", "agents"), [("cluster", None), ("bus", "node"), ("bus", "simulate")])
def test_access_gives_each_service_its_own_login_file(
    helm: ModuleType,
    kubernetes_validate: ModuleType,
    access_secrets: AccessSecrets,
    mode: str,
    agents: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """access.existingSecret: every container runs with --settings naming its role's file, the one
    file of the Secret its pod mounts (read-only, mode 0400); a node's agent gets the node agents'
    Secret and picks agent-<node>.yaml by $(NODE_NAME); in cluster mode the watcher logs in as the
    watcher and no node agents' Secret is needed. The file logs the service in as its role, and no
    password or login variable is anywhere in what the chart renders."""
    if mode == "cluster":
        values: dict[str, Any] = {"access": {"existingSecret": ACCESS["existingSecret"]}}
    else:
        values = {"mode": mode, "access": ACCESS, "gpuAgent": {"mode": agents}}
    rendered = render_chart(helm, values)
    node_agent = "agent-$(NODE_NAME)"
    roles = {"queue": "queue", "cycle": "cycle", "binder": "binder"}
    if mode == "cluster":
        roles["watcher"] = "watcher"
    else:
        roles["gpu-agent"] = "gpu-agent" if agents == "simulate" else node_agent
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
    assert "watcher.yaml" in bare
    bus = render_chart(helm, {"mode": "bus", "access": ACCESS}).notes
    assert "--settings DIR/client.yaml" in bus and "watcher.yaml" not in bus
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


HA_VALUES: dict[str, Any] = values_of(CHART / "ci" / "ha-values.yaml")
NATS_SERVERS = [f"kubus-nats-{i}.kubus-nats-headless.{NAMESPACE}.svc" for i in range(3)]
"""The NATS chart's servers as its routes name them (nats-io/k8s, helm/charts/nats/files/config/
cluster.yaml: <statefulSet>-<i>.<headlessService>, the fullname and fullname-headless)."""
VALKEYS = [f"kubus-valkey-{i}.kubus-valkey.{NAMESPACE}.svc" for i in range(3)]
SENTINELS = [f"kubus-valkey-sentinel-{i}.kubus-valkey-sentinel.{NAMESPACE}.svc" for i in range(3)]
# Stand-ins for the Valkey image's programs: valkey-server keeps the configuration it was given,
# valkey-cli answers a sentinel's question with $NAMED_PRIMARY (or cannot connect), every name resolves.
FAKE_BIN = {
    "valkey-server": 'cp "$1" "$OUT/$(basename "$1")"; echo "$@" > "$OUT/args"\n',
    "valkey-cli": 'case "$*" in *get-master-addr-by-name*) [ -n "${NAMED_PRIMARY:-}" ] || exit 1;'
                  ' echo "$NAMED_PRIMARY"; echo 6379;; *) echo PONG;; esac\n',
    "getent": "exit 0\n",
}  # fmt: skip


def run_server_script(
    rendered: Rendered, script: str, pod: str, tmp_path: Path, *, named: str = "", admin: str | None = None
) -> dict[str, str]:
    """Run valkeyHA's ``script`` (valkey.sh or sentinel.sh) as pod ``pod`` would, its container's
    paths under ``tmp_path``, and return what it started the server with: the configuration's
    lines, and the command's arguments (``args``). ``named``: the primary the sentinels name;
    ``admin``: the admin password of a mounted admin.yaml (access.existingSecret)."""
    import subprocess

    data = rendered.get("ConfigMap", "kubus-valkey")["data"]
    root, out, bin_dir = tmp_path / "root", tmp_path / "out", tmp_path / "bin"
    mounts = ("scripts", "etc/valkey", "run/valkey", "data", "etc/kubus-access")
    for folder in (out, bin_dir, *(root / d for d in mounts)):
        folder.mkdir(parents=True, exist_ok=True)

    def local(text: str) -> str:
        for path in ("/scripts/", "/etc/valkey/", "/run/valkey/", "/etc/kubus-access/", '"/data"', "/data/"):
            text = text.replace(path, path.replace("/", f"{root}/", 1))
        return text

    for name in ("common.sh", script):
        (root / "scripts" / name).write_text(local(data[name]))
    (root / "etc/valkey/valkey.conf").write_text(data["valkey.conf"])
    if admin is not None:
        (root / "etc/kubus-access/admin.yaml").write_text(f"redis_username: admin\nredis_password: '{admin}'\n")
    for name, body in FAKE_BIN.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    service = pod.rsplit("-", 1)[0]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out), "NAMED_PRIMARY": named,
           "POD_NAME": pod, "SERVICE_NAME": service, "POD_NAMESPACE": NAMESPACE}  # fmt: skip
    subprocess.run(["sh", str(root / "scripts" / script)], env=env, check=True, timeout=30)
    conf = next(p for p in out.iterdir() if p.name.endswith(".conf"))
    return {"conf": conf.read_text(), "args": (out / "args").read_text()}


def test_high_availability_values_leave_no_single_server(helm: ModuleType, kubernetes_validate: ModuleType) -> None:
    """ci/ha-values.yaml: every service connects to all three NATS servers and keeps three copies
    of each stream, finds the Valkey primary through the three sentinels and waits for one replica;
    the queue has a standby, each profile's cycle a warm one; the Valkey StatefulSet is a primary and
    two replicas, the sentinels three, each pod named by a headless Service; all valid objects."""
    rendered = render_chart(helm, HA_VALUES)
    check_valid_kubernetes(rendered, kubernetes_validate)
    for workload in rendered.workloads():
        for _, container in pod_containers(workload):
            env = container_env(container)
            where = workload["metadata"]["name"]
            assert env["KUBUS_NATS_URL"].split(",") == [f"nats://{host}:4222" for host in NATS_SERVERS], where
            assert env["KUBUS_STREAM_REPLICAS"] == "3", where
            assert env["KUBUS_REDIS_SENTINELS"].split(",") == [f"{host}:26379" for host in SENTINELS], where
            assert env["KUBUS_REDIS_MASTER"] == "kubus", where
            assert env["KUBUS_REDIS_WAIT_REPLICAS"] == "1", where
    queue = rendered.get("Deployment", "kubus-queue")
    assert queue["spec"]["replicas"] == 2
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert queue["spec"]["strategy"] == rolling
    assert rendered.get("PodDisruptionBudget", "kubus-queue")["spec"]["maxUnavailable"] == 1
    anti = queue["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (spread,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    cycles = [d for d in rendered.of_kind("Deployment") if component(d) == "cycle"]
    assert cycles and all(d["spec"]["replicas"] == 2 for d in cycles)
    assert not [d for d in cycles if "--cold-standby" in d["spec"]["template"]["spec"]["containers"][0]["args"]]
    for name, replicas in (("kubus-valkey", 3), ("kubus-valkey-sentinel", 3)):
        statefulset = rendered.get("StatefulSet", name)
        service = rendered.get("Service", name)
        assert statefulset["spec"]["replicas"] == replicas
        assert statefulset["spec"]["serviceName"] == name
        assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
        assert service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
        assert [t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]] == ["data"]
        assert rendered.get("PodDisruptionBudget", name)["spec"]["maxUnavailable"] == 1
        (container,) = statefulset["spec"]["template"]["spec"]["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    common = rendered.get("ConfigMap", "kubus-valkey")["data"]["common.sh"]
    assert f'VALKEY_HOSTS="{" ".join(VALKEYS)}"' in common
    assert f'SENTINEL_HOSTS="{" ".join(SENTINELS)}"' in common


def test_valkey_replicas_follow_the_primary_and_sentinels_monitor_it(helm: ModuleType, tmp_path: Path) -> None:
    """valkeyHA's start scripts, run: on a first start (no sentinel names a primary) pod 0 is the
    primary and the others replicate it; afterwards each follows the primary the sentinels name.
    The sentinels monitor it under the master name with quorum 2 and the down-after time."""
    rendered = render_chart(helm, HA_VALUES)
    primary = run_server_script(rendered, "valkey.sh", "kubus-valkey-0", tmp_path / "0")["conf"].splitlines()
    assert not [line for line in primary if line.startswith("replicaof")]
    assert f"replica-announce-ip {VALKEYS[0]}" in primary
    assert {"appendonly yes", "appendfsync everysec", f'dir "{tmp_path / "0/root/data"}"'} <= set(primary)
    replica = run_server_script(rendered, "valkey.sh", "kubus-valkey-1", tmp_path / "1")["conf"].splitlines()
    assert f"replicaof {VALKEYS[0]} 6379" in replica
    assert not [line for line in replica if line.startswith(("aclfile", "masteruser", "masterauth"))]
    moved = run_server_script(rendered, "valkey.sh", "kubus-valkey-0", tmp_path / "2", named=VALKEYS[2])["conf"]
    assert f"replicaof {VALKEYS[2]} 6379" in moved.splitlines(), "a restarted old primary follows the new one"
    started = run_server_script(rendered, "sentinel.sh", "kubus-valkey-sentinel-1", tmp_path / "3")
    sentinel = started["conf"].splitlines()
    assert started["args"].split()[-1] == "--sentinel"
    assert f"sentinel monitor kubus {VALKEYS[0]} 6379 2" in sentinel
    assert "sentinel down-after-milliseconds kubus 5000" in sentinel
    hostnames = {"sentinel resolve-hostnames yes", "sentinel announce-hostnames yes"}
    assert {*hostnames, f"sentinel announce-ip {SENTINELS[1]}"} <= set(sentinel)
    later = run_server_script(rendered, "sentinel.sh", "kubus-valkey-sentinel-2", tmp_path / "4", named=VALKEYS[1])
    assert f"sentinel monitor kubus {VALKEYS[1]} 6379 2" in later["conf"].splitlines()


def test_valkey_ha_logs_in_with_the_access_secret(
    helm: ModuleType, kubernetes_validate: ModuleType, access_secrets: AccessSecrets, tmp_path: Path
) -> None:
    """With access.existingSecret the instances load the Secret's users.acl, replicate and are
    watched as its admin user (the one user of `kubus access init` allowed to replicate): the
    admin.yaml the Secret holds gives masterauth and the sentinels' auth-pass; no password is in
    the rendered objects."""
    rendered = render_chart(helm, {**HA_VALUES, "access": {"existingSecret": "kubus-access"}})
    check_valid_kubernetes(rendered, kubernetes_validate)
    secret = access_secrets.secrets["kubus-access"]
    for name, keys in (("kubus-valkey", ["users.acl", "admin.yaml"]), ("kubus-valkey-sentinel", ["admin.yaml"])):
        spec = rendered.get("StatefulSet", name)["spec"]["template"]["spec"]
        (volume,) = [v for v in spec["volumes"] if v["name"] == "access"]
        assert volume["secret"]["secretName"] == "kubus-access"
        assert [item["key"] for item in volume["secret"]["items"]] == keys
        assert all(key in secret for key in keys), "kubus access init writes them"
    admin = access_secrets.passwords["admin"]
    assert yaml.safe_load(secret["admin.yaml"])["redis_password"] == admin
    replica = run_server_script(rendered, "valkey.sh", "kubus-valkey-1", tmp_path / "v", admin=admin)["conf"]
    assert {"masteruser admin", f"masterauth {admin}"} <= set(replica.splitlines())
    assert any(line.startswith("aclfile ") and line.endswith("/users.acl") for line in replica.splitlines())
    sentinel = run_server_script(rendered, "sentinel.sh", "kubus-valkey-sentinel-0", tmp_path / "s", admin=admin)
    sentinel = sentinel["conf"]
    assert {"sentinel auth-user kubus admin", f"sentinel auth-pass kubus {admin}"} <= set(sentinel.splitlines())
    text = yaml.safe_dump_all(rendered.objects) + rendered.notes
    assert admin not in text


def test_without_the_high_availability_values_nothing_changes(helm: ModuleType) -> None:
    """The defaults: one queue (Recreate, no budget), no StatefulSet of the chart's own, the single
    bundled NATS and Valkey, and no replication setting in any container."""
    rendered = render_chart(helm, {})
    assert rendered.of_kind("StatefulSet") == []
    queue = rendered.get("Deployment", "kubus-queue")
    assert queue["spec"]["replicas"] == 1 and queue["spec"]["strategy"] == {"type": "Recreate"}
    assert "affinity" not in queue["spec"]["template"]["spec"]
    assert [p["metadata"]["name"] for p in rendered.of_kind("PodDisruptionBudget") if component(p) == "queue"] == []
    ha_vars = {"KUBUS_STREAM_REPLICAS", "KUBUS_REDIS_SENTINELS", "KUBUS_REDIS_MASTER", "KUBUS_REDIS_WAIT_REPLICAS",
               "KUBUS_REDIS_WAIT_TIMEOUT"}  # fmt: skip
    for workload in rendered.workloads():
        for _, container in pod_containers(workload):
            env = container_env(container)
            assert not ha_vars & env.keys()
            assert env["KUBUS_NATS_URL"] == "nats://kubus-nats:4222"
            assert env["KUBUS_REDIS_URL"] == "redis://kubus-valkey:6379/0"
            flags = {arg.split("=")[0] for arg in container["args"]}
            assert not {"--lease-ttl", "--renew-interval", "--cold-standby"} & flags


def test_lease_values_reach_the_queue_and_cycles(helm: ModuleType) -> None:
    binpack_values = {"warmStandby": False, "renewInterval": 2}
    values = {"queue": {"leaseTtl": 3, "renewInterval": 0.5},
              "cycle": {"leaseTtl": 4, "overrides": {"gpu-binpack": binpack_values}}}  # fmt: skip
    rendered = render_chart(helm, values)
    (queue,) = rendered.get("Deployment", "kubus-queue")["spec"]["template"]["spec"]["containers"]
    assert {"--lease-ttl=3", "--renew-interval=0.5"} <= set(queue["args"])
    (kubus,) = rendered.get("Deployment", "kubus-cycle-kubus")["spec"]["template"]["spec"]["containers"]
    (binpack,) = rendered.get("Deployment", "kubus-cycle-gpu-binpack")["spec"]["template"]["spec"]["containers"]
    assert "--lease-ttl=4" in kubus["args"] and "--cold-standby" not in kubus["args"]
    assert {"--lease-ttl=4", "--renew-interval=2", "--cold-standby"} <= set(binpack["args"])


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
    ({"mode": "kubernetes"}, "mode"),
    ({"watcher": {"replicas": 2}}, "replicas"),
    ({"watcher": {"resources": {"requests": {"cpu": "one"}}}}, "cpu"),
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
    ({"mode": "bus", "access": {"existingSecret": "kubus-access"}}, "access.nodeAgentsSecret: required"),
    ({"access": {"nodeAgentsSecret": "kubus-node-agents"}}, "access.nodeAgentsSecret: needs access.existingSecret"),
    ({"access": {"existingSecret": "Kubus_Access"}}, "existingSecret"),
    ({"access": {"secret": "kubus-access"}}, "secret"),
    ({"access": ACCESS, "podSecurityContext": {"fsGroup": None}}, "podSecurityContext.fsGroup"),
    ({"valkeyHA": {"enabled": True}}, "valkeyHA.enabled: set valkey.enabled=false"),
    ({"valkey": {"enabled": False}, "valkeyHA": {"enabled": True}, "externalRedis": {"url": "redis://r:6379"}},
     "valkeyHA.enabled: externalRedis.url is set"),
    ({**HA_VALUES, "valkeyHA": {"enabled": True, "sentinel": {"quorum": 4}}}, "valkeyHA.sentinel.quorum"),
    ({**HA_VALUES, "valkeyHA": {"enabled": True, "waitReplicas": 3}}, "valkeyHA.waitReplicas"),
    ({**HA_VALUES, "streamReplicas": 5}, "streamReplicas: 5 copies need as many NATS servers"),
    ({"streamReplicas": 6}, "streamReplicas"),
    ({"queue": {"replicas": 0}}, "replicas"),
    ({"queue": {"leaseTtl": 2, "renewInterval": 2}}, "queue.renewInterval"),
    ({"cycle": {"overrides": {"kubus": {"renewInterval": 6}}}}, "cycle.overrides.kubus.renewInterval"),
]  # fmt: skip


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
