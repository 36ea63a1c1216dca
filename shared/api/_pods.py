"""A Pod manifest -> Pod, with the API server's defaults and validation (see kubus.api.manifests)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from fractions import Fraction

from kubus.api._fields import (
    Reader,
    key_path,
    quote,
)
from kubus.api._metadata import STDIN, read_object
from kubus.api.gpus import (
    GPU_DEVICES_ANNOTATION,
    GPUAnnotationError,
    pod_gpu_devices,
    pod_gpu_request,
)
from kubus.api.names import dns1123_label_error, dns1123_subdomain_error, label_value_error, qualified_name_error
from kubus.api.node_affinity import Validation, check_selector_values, decode_node_affinity
from kubus.api.objects import (
    DEFAULT_SCHEDULER_NAME,
    Affinity,
    Container,
    ContainerPort,
    LabelSelector,
    LabelSelectorRequirement,
    NodeAffinity,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodSpec,
    PreemptionPolicy,
    SelectorOperator,
    TaintEffect,
    Toleration,
    TolerationOperator,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from kubus.api.quantity import MAX_INT64
from kubus.api.resource_names import is_overcommit_allowed
from kubus.core import codec
from kubus.core.codec import JSONMapping, JSONObject, JSONValue

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_SET_OPERATORS = (SelectorOperator.IN, SelectorOperator.NOT_IN)
_EXISTS_OPERATORS = (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST)


def _node_affinity(r: Reader, raw: JSONValue, path: str) -> NodeAffinity:
    return decode_node_affinity(r, raw, path, Validation.POD)


def _label_selector(r: Reader, raw: JSONValue, path: str) -> LabelSelector | None:
    if raw is None:
        return None
    selector = r.mapping(raw, path)
    match_labels = r.string_map(
        selector.get("matchLabels"),
        f"{path}.matchLabels",
        qualified_name_error,
        label_value_error,
    )
    expressions = []
    expr_path = f"{path}.matchExpressions"
    for i, item in enumerate(r.sequence(selector.get("matchExpressions"), expr_path)):
        item_path = f"{expr_path}[{i}]"
        req = r.mapping(item, item_path)
        key = r.required_string(req.get("key"), f"{item_path}.key")
        if problem := qualified_name_error(key):
            r.fail(f"{item_path}.key", f"{quote(key)} is not a valid label key: {problem}")
        if req.get("operator") is None:
            r.fail(f"{item_path}.operator", "is required")
        op = r.enum(req.get("operator"), f"{item_path}.operator", SelectorOperator)
        if op not in _SET_OPERATORS and op not in _EXISTS_OPERATORS:
            r.fail(
                f"{item_path}.operator",
                f"{quote(op.value)} is not a valid label selector operator "
                "(supported: In, NotIn, Exists, DoesNotExist)",
            )
        values = r.string_list(req.get("values"), f"{item_path}.values")
        check_selector_values(r, op, values, f"{item_path}.values")
        expressions.append(LabelSelectorRequirement(key=key, operator=op, values=values))
    return LabelSelector(match_labels=match_labels, match_expressions=tuple(expressions))


def _pod_affinity_term(r: Reader, raw: JSONValue, path: str) -> PodAffinityTerm:
    term = r.mapping(raw, path)
    topology_key = r.required_string(term.get("topologyKey"), f"{path}.topologyKey")
    if problem := qualified_name_error(topology_key):
        r.fail(f"{path}.topologyKey", f"{quote(topology_key)} is not a valid label key: {problem}")
    return PodAffinityTerm(
        topology_key=topology_key,
        label_selector=_label_selector(r, term.get("labelSelector"), f"{path}.labelSelector"),
        namespaces=r.string_list(term.get("namespaces"), f"{path}.namespaces"),
        namespace_selector=_label_selector(r, term.get("namespaceSelector"), f"{path}.namespaceSelector"),
        match_label_keys=r.string_list(term.get("matchLabelKeys"), f"{path}.matchLabelKeys", qualified_name_error),
        mismatch_label_keys=r.string_list(
            term.get("mismatchLabelKeys"), f"{path}.mismatchLabelKeys", qualified_name_error
        ),
    )


def _pod_affinity(r: Reader, raw: JSONValue, path: str) -> PodAffinity:
    affinity = r.mapping(raw, path)
    req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
    required = tuple(
        _pod_affinity_term(r, item, f"{req_path}[{i}]")
        for i, item in enumerate(r.sequence(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), req_path))
    )
    pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, item in enumerate(r.sequence(affinity.get("preferredDuringSchedulingIgnoredDuringExecution"), pref_path)):
        item_path = f"{pref_path}[{i}]"
        weighted = r.mapping(item, item_path)
        weight = r.integer(weighted.get("weight"), f"{item_path}.weight", lo=1, hi=100)
        if weighted.get("podAffinityTerm") is None:
            r.fail(f"{item_path}.podAffinityTerm", "is required")
        term_path = f"{item_path}.podAffinityTerm"
        term = _pod_affinity_term(r, weighted.get("podAffinityTerm"), term_path)
        preferred.append(WeightedPodAffinityTerm(weight=weight, pod_affinity_term=term))
    return PodAffinity(required=required, preferred=tuple(preferred))


def _affinity(r: Reader, raw: JSONValue, path: str) -> Affinity | None:
    if raw is None:
        return None
    affinity = r.mapping(raw, path)
    node = affinity.get("nodeAffinity")
    pod = affinity.get("podAffinity")
    anti = affinity.get("podAntiAffinity")
    return Affinity(
        node_affinity=None if node is None else _node_affinity(r, node, f"{path}.nodeAffinity"),
        pod_affinity=None if pod is None else _pod_affinity(r, pod, f"{path}.podAffinity"),
        pod_anti_affinity=(None if anti is None else _pod_affinity(r, anti, f"{path}.podAntiAffinity")),
    )


def _toleration(r: Reader, raw: JSONValue, path: str) -> Toleration:
    tol = r.mapping(raw, path)
    key = r.string(tol.get("key"), f"{path}.key")
    if key and (problem := qualified_name_error(key)):
        r.fail(f"{path}.key", f"{quote(key)} is not a valid taint key: {problem}")
    op_raw = tol.get("operator")
    operator = (
        TolerationOperator.EQUAL
        if op_raw is None or op_raw == ""
        else r.enum(op_raw, f"{path}.operator", TolerationOperator)
    )
    value_text = r.string(tol.get("value"), f"{path}.value")
    if not key and operator is not TolerationOperator.EXISTS:
        r.fail(f"{path}.operator", "must be Exists when `key` is empty (to tolerate every taint)")
    if operator is TolerationOperator.EXISTS and value_text:
        r.fail(f"{path}.value", "must be empty when `operator` is 'Exists'")
    if operator is TolerationOperator.EQUAL and (problem := label_value_error(value_text)):
        r.fail(f"{path}.value", f"{quote(value_text)} is not valid: {problem}")
    effect_raw = tol.get("effect")
    effect = None if effect_raw is None or effect_raw == "" else r.enum(effect_raw, f"{path}.effect", TaintEffect)
    seconds = r.optional_integer(
        tol.get("tolerationSeconds"), f"{path}.tolerationSeconds", lo=-MAX_INT64 - 1, hi=MAX_INT64
    )
    if seconds is not None and effect is not TaintEffect.NO_EXECUTE:
        r.fail(f"{path}.effect", "must be 'NoExecute' when `tolerationSeconds` is set")
    return Toleration(key=key, operator=operator, value=value_text, effect=effect, toleration_seconds=seconds)


# --- pods ---------------------------------------------------------------------------------------


def _topology_spread(r: Reader, raw: JSONValue, path: str) -> tuple[TopologySpreadConstraint, ...]:
    result = []
    seen: dict[tuple[str, str], int] = {}
    for i, item in enumerate(r.sequence(raw, path)):
        item_path = f"{path}[{i}]"
        tsc = r.mapping(item, item_path)
        max_skew = r.integer(tsc.get("maxSkew"), f"{item_path}.maxSkew", lo=1, hi=_INT32_MAX)
        topology_key = r.required_string(tsc.get("topologyKey"), f"{item_path}.topologyKey")
        if problem := qualified_name_error(topology_key):
            r.fail(
                f"{item_path}.topologyKey",
                f"{quote(topology_key)} is not a valid label key: {problem}",
            )
        if tsc.get("whenUnsatisfiable") is None:
            r.fail(f"{item_path}.whenUnsatisfiable", "is required")
        when = r.choice(
            tsc.get("whenUnsatisfiable"),
            f"{item_path}.whenUnsatisfiable",
            ("DoNotSchedule", "ScheduleAnyway"),
        )
        if (topology_key, when) in seen:
            r.fail(
                item_path,
                f"duplicate topologyKey and whenUnsatisfiable pair ({topology_key}, {when}) "
                f"with {path}[{seen[(topology_key, when)]}]",
            )
        seen[(topology_key, when)] = i
        min_domains = r.optional_integer(tsc.get("minDomains"), f"{item_path}.minDomains", lo=1, hi=_INT32_MAX)
        if min_domains is not None and when != "DoNotSchedule":
            r.fail(
                f"{item_path}.minDomains",
                "can only be set when `whenUnsatisfiable` is 'DoNotSchedule'",
            )
        policies = {}
        for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            raw_policy = tsc.get(name)
            policies[name] = (
                None if raw_policy is None else r.choice(raw_policy, f"{item_path}.{name}", ("Honor", "Ignore"))
            )
        selector = _label_selector(r, tsc.get("labelSelector"), f"{item_path}.labelSelector")
        keys_path = f"{item_path}.matchLabelKeys"
        match_label_keys = r.string_list(tsc.get("matchLabelKeys"), keys_path, qualified_name_error)
        if match_label_keys and selector is None:
            r.fail(keys_path, "must not be specified when labelSelector is not set")
        if selector is not None:
            # kube's ValidateMatchLabelKeysInTopologySpread: a key the selector already constrains
            selector_keys = set(selector.match_labels) | {e.key for e in selector.match_expressions}
            for j, key in enumerate(match_label_keys):
                if key in selector_keys:
                    r.fail(f"{keys_path}[{j}]", f"{quote(key)} exists in both matchLabelKeys and labelSelector")
        result.append(
            TopologySpreadConstraint(
                max_skew=max_skew,
                topology_key=topology_key,
                when_unsatisfiable=when,
                label_selector=selector,
                min_domains=min_domains,
                node_affinity_policy=policies["nodeAffinityPolicy"],
                node_taints_policy=policies["nodeTaintsPolicy"],
                match_label_keys=match_label_keys,
            )
        )
    return tuple(result)


def _ports(r: Reader, raw: JSONValue, path: str, *, host_network: bool) -> tuple[ContainerPort, ...]:
    """Container ports. With hostNetwork, the API server defaults hostPort to containerPort
    (SetDefaults_Pod) and refuses any other hostPort, so NodePorts sees the ports the pod takes."""
    ports = []
    for i, item in enumerate(r.sequence(raw, path)):
        item_path = f"{path}[{i}]"
        port = r.mapping(item, item_path)
        if port.get("containerPort") is None:
            r.fail(f"{item_path}.containerPort", "is required")
        container_port = r.integer(port.get("containerPort"), f"{item_path}.containerPort", lo=1, hi=65535)
        host_port = 0
        if port.get("hostPort") is not None:
            host_port = r.integer(port.get("hostPort"), f"{item_path}.hostPort", lo=0, hi=65535)
        if host_network:
            if host_port not in (0, container_port):
                r.fail(f"{item_path}.hostPort", "must match `containerPort` when `hostNetwork` is true")
            host_port = container_port
        protocol = (
            "TCP"
            if port.get("protocol") is None or port.get("protocol") == ""
            else r.choice(port.get("protocol"), f"{item_path}.protocol", ("TCP", "UDP", "SCTP"))
        )
        host_ip = r.string(port.get("hostIP"), f"{item_path}.hostIP")
        if host_ip:
            try:
                ipaddress.ip_address(host_ip)
            except ValueError:
                r.fail(f"{item_path}.hostIP", f"{quote(host_ip)} is not a valid IP address")
        ports.append(
            ContainerPort(
                container_port=container_port,
                host_port=host_port,
                protocol=protocol,
                host_ip=host_ip,
            )
        )
    return tuple(ports)


def _container(r: Reader, raw: JSONValue, path: str, *, init: bool, host_network: bool) -> Container:
    spec = r.mapping(raw, path)
    if raw is None:
        r.fail(path, "expected a container, got null")
    name = r.required_string(spec.get("name"), f"{path}.name")
    if problem := dns1123_label_error(name):
        r.fail(f"{path}.name", f"{quote(name)} is not a valid container name: {problem}")
    resources = r.mapping(spec.get("resources"), f"{path}.resources")
    requests = r.resources(resources.get("requests"), f"{path}.resources.requests", pod=True)
    limits = r.resources(resources.get("limits"), f"{path}.resources.limits", pod=True)
    for res_name, (_, req_exact, req_path) in requests.items():
        if res_name not in limits:
            continue
        _, lim_exact, _ = limits[res_name]
        limit_text = _format_exact(lim_exact)
        if not is_overcommit_allowed(res_name) and req_exact != lim_exact:
            r.fail(req_path, f"must be equal to {res_name} limit of {limit_text}")
        if req_exact > lim_exact:
            r.fail(req_path, f"must be less than or equal to {res_name} limit of {limit_text}")
    # SetDefaults_Pod: a limit without a request is the request.
    request_list = {n: base for n, (base, _, _) in requests.items()}
    for res_name, (lim_base, _, _) in limits.items():
        request_list.setdefault(res_name, lim_base)
    restart_policy = None
    if init and spec.get("restartPolicy") is not None:
        restart_policy = r.choice(spec.get("restartPolicy"), f"{path}.restartPolicy", ("Always",))
    return Container(
        name=name,
        image=r.string(spec.get("image"), f"{path}.image"),
        requests=request_list,
        limits={n: base for n, (base, _, _) in limits.items()},
        ports=_ports(r, spec.get("ports"), f"{path}.ports", host_network=host_network),
        restart_policy=restart_policy,
    )


def _format_exact(q: Fraction) -> str:
    """A quantity for a message: an integer as is, else in milli-units if exact ("500m")."""
    if q.denominator == 1:
        return str(q.numerator)
    milli = q * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(q))


def _pod_spec(r: Reader, raw: JSONValue) -> PodSpec:
    if raw is None:
        r.fail("spec", "is required")
    spec = r.mapping(raw, "spec")
    containers_raw = r.sequence(spec.get("containers"), "spec.containers")
    if not containers_raw:
        r.fail("spec.containers", "is required: a pod needs at least one container")
    host_network = r.boolean(spec.get("hostNetwork"), "spec.hostNetwork", False)
    containers = tuple(
        _container(r, c, f"spec.containers[{i}]", init=False, host_network=host_network)
        for i, c in enumerate(containers_raw)
    )
    init_containers = tuple(
        _container(r, c, f"spec.initContainers[{i}]", init=True, host_network=host_network)
        for i, c in enumerate(r.sequence(spec.get("initContainers"), "spec.initContainers"))
    )
    seen_names: dict[str, str] = {}
    for group, items in (("initContainers", init_containers), ("containers", containers)):
        for i, container in enumerate(items):
            where = f"spec.{group}[{i}]"
            if container.name in seen_names:
                r.fail(
                    f"{where}.name",
                    f"duplicate container name {quote(container.name)} (also {seen_names[container.name]})",
                )
            seen_names[container.name] = where

    scheduler_name = r.string(spec.get("schedulerName"), "spec.schedulerName")
    priority = 0
    if spec.get("priority") is not None:
        priority = r.integer(spec.get("priority"), "spec.priority", lo=_INT32_MIN, hi=_INT32_MAX)
    preemption = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    if spec.get("preemptionPolicy") is not None:
        preemption = r.enum(spec.get("preemptionPolicy"), "spec.preemptionPolicy", PreemptionPolicy)
    node_name = r.string(spec.get("nodeName"), "spec.nodeName")
    if node_name and (problem := dns1123_subdomain_error(node_name)):
        r.fail("spec.nodeName", f"{quote(node_name)} is not a valid node name: {problem}")

    gates = []
    for i, item in enumerate(r.sequence(spec.get("schedulingGates"), "spec.schedulingGates")):
        gate_path = f"spec.schedulingGates[{i}]"
        gate = r.mapping(item, gate_path)
        gate_name = r.required_string(gate.get("name"), f"{gate_path}.name")
        if problem := qualified_name_error(gate_name):
            r.fail(f"{gate_path}.name", f"{quote(gate_name)} is not valid: {problem}")
        if gate_name in gates:
            r.fail(f"{gate_path}.name", f"duplicate scheduling gate {quote(gate_name)}")
        gates.append(gate_name)
    if gates and node_name:
        r.fail("spec.schedulingGates", "cannot be set on a pod that already has spec.nodeName")

    return PodSpec(
        containers=containers,
        init_containers=init_containers,
        scheduler_name=scheduler_name or DEFAULT_SCHEDULER_NAME,
        priority=priority,
        priority_class_name=r.string(spec.get("priorityClassName"), "spec.priorityClassName"),
        preemption_policy=preemption,
        node_name=node_name,
        node_selector=r.string_map(
            spec.get("nodeSelector"), "spec.nodeSelector", qualified_name_error, label_value_error
        ),
        affinity=_affinity(r, spec.get("affinity"), "spec.affinity"),
        tolerations=tuple(
            _toleration(r, t, f"spec.tolerations[{i}]")
            for i, t in enumerate(r.sequence(spec.get("tolerations"), "spec.tolerations"))
        ),
        topology_spread_constraints=_topology_spread(
            r, spec.get("topologySpreadConstraints"), "spec.topologySpreadConstraints"
        ),
        overhead=r.resource_list(spec.get("overhead"), "spec.overhead", pod=True),
        scheduling_gates=tuple(gates),
        unhonoured=_unhonoured(r, spec),
    )


# Volume sources that kube-scheduler's volume plugins act on, and what kubus then fails to check.
_CLAIM_PLUGINS = "VolumeBinding, VolumeZone and NodeVolumeLimits"
_UNHONOURED_VOLUMES = {
    "persistentVolumeClaim": f"kubus has no PersistentVolumes: {_CLAIM_PLUGINS} do not run, so the "
    "claim's binding, zone and the node's attach limits are not checked",
    "ephemeral": f"kubus has no PersistentVolumes: {_CLAIM_PLUGINS} do not run for the generic ephemeral "
    "volume's claim",
    "csi": "NodeVolumeLimits does not run: the node's CSI attach limits are not checked",
    "gcePersistentDisk": "VolumeRestrictions does not run: a disk another pod mounts read-write is not checked",
    "awsElasticBlockStore": "VolumeRestrictions does not run: a volume another pod uses is not checked",
    "rbd": "VolumeRestrictions does not run: an image another pod mounts read-write is not checked",
    "iscsi": "VolumeRestrictions does not run: a LUN another pod mounts read-write is not checked",
}


def _unhonoured(r: Reader, spec: JSONMapping) -> tuple[str, ...]:
    """The fields of a pod spec that kube-scheduler acts on and kubus does not, one line each
    (PodSpec.unhonoured). Never raises for a field it only reports."""
    out = []
    for i, volume in enumerate(r.sequence(spec.get("volumes"), "spec.volumes")):
        if not isinstance(volume, Mapping):
            continue
        for source, why in _UNHONOURED_VOLUMES.items():
            if volume.get(source) is not None:
                out.append(f"spec.volumes[{i}].{source}: not honoured: {why}")
    if spec.get("resourceClaims"):
        out.append(
            "spec.resourceClaims: not honoured: DynamicResources does not run, the claims are not allocated "
            "or checked against any node"
        )
    if spec.get("runtimeClassName") and not spec.get("overhead"):
        out.append(
            "spec.runtimeClassName: not honoured: RuntimeClasses are not read, so their overhead and "
            "scheduling (nodeSelector, tolerations) are not applied; set spec.overhead for the overhead"
        )
    return tuple(out)


def _check_pod_gpus(r: Reader, pod: Pod) -> None:
    try:
        request = pod_gpu_request(pod)
        devices = pod_gpu_devices(pod)
    except GPUAnnotationError as e:
        r.fail(key_path("metadata.annotations", e.annotation), str(e))
    if not devices:
        return
    where = key_path("metadata.annotations", GPU_DEVICES_ANNOTATION)
    if request is None:
        r.fail(where, "the pod asks for no GPU")
    if not pod.spec.node_name:
        r.fail(where, "is only valid on a pod bound to a node (spec.nodeName)")
    if len(devices) != request.count:
        r.fail(where, f"lists {len(devices)} GPU(s) but the pod asks for {request.count}")


_SPECS: dict[bytes, PodSpec] = {}
"""Spec JSON -> the PodSpec read from it (`_shared_pod_spec`)."""
_SPECS_KEPT = 4096


def _shared_pod_spec(r: Reader, raw: JSONValue) -> PodSpec:
    """`_pod_spec`, read once for every pod whose spec is the same JSON: the pods of one
    Deployment or Job share their template's, and each service reads every pod it handles (a
    frozen PodSpec is safe to share). Only specs that read without error are kept (an error
    names the pod), at most `_SPECS_KEPT` at once."""
    if not isinstance(raw, dict):
        return _pod_spec(r, raw)
    try:
        key = codec.dumps(raw)
    except TypeError:  # what JSON cannot hold (a key that is no string): the reader says what
        return _pod_spec(r, raw)
    spec = _SPECS.get(key)
    if spec is None:
        spec = _pod_spec(r, raw)
        if len(_SPECS) >= _SPECS_KEPT:
            _SPECS.clear()
        _SPECS[key] = spec
    return spec


def read_pod(obj: JSONValue, source: str, where: str) -> Pod:
    r, metadata = read_object(obj, source, where, "Pod", namespaced=True)
    pod = Pod(metadata=metadata, spec=_shared_pod_spec(r, obj.get("spec")))
    _check_pod_gpus(r, pod)
    return pod


def parse_pod(obj: JSONMapping, *, source: str = STDIN, index: int = 1) -> Pod:
    """A Pod from its decoded manifest (a dict as YAML/JSON gives it), defaulted and validated.

    `source` and `index` (the 1-based document number) only label errors. Raises ManifestError.
    """
    return read_pod(obj, source, f"document {index}")


# ---- pod affinity on the wire (a reservation carries it for the plugins that read other pods) ----


def selector_manifest(selector: LabelSelector | None) -> JSONObject | None:
    """A LabelSelector in manifest form (None for a nil selector, {} for the empty one)."""
    if selector is None:
        return None
    out: JSONObject = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [
            {"key": r.key, "operator": r.operator.value, "values": list(r.values)} for r in selector.match_expressions
        ]
    return out


def _term_manifest(term: PodAffinityTerm) -> JSONObject:
    out: JSONObject = {"topologyKey": term.topology_key}
    if term.label_selector is not None:
        out["labelSelector"] = selector_manifest(term.label_selector)
    if term.namespaces:
        out["namespaces"] = list(term.namespaces)
    if term.namespace_selector is not None:
        out["namespaceSelector"] = selector_manifest(term.namespace_selector)
    if term.match_label_keys:
        out["matchLabelKeys"] = list(term.match_label_keys)
    if term.mismatch_label_keys:
        out["mismatchLabelKeys"] = list(term.mismatch_label_keys)
    return out


def _affinity_manifest(affinity: PodAffinity) -> JSONObject:
    out: JSONObject = {}
    if affinity.required:
        out["requiredDuringSchedulingIgnoredDuringExecution"] = [_term_manifest(t) for t in affinity.required]
    if affinity.preferred:
        out["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w.weight, "podAffinityTerm": _term_manifest(w.pod_affinity_term)} for w in affinity.preferred
        ]
    return out


def pod_affinity_manifest(pod: Pod) -> JSONObject:
    """The pod's podAffinity / podAntiAffinity in manifest form ({} when it has neither)."""
    affinity = pod.spec.affinity
    out: JSONObject = {}
    if affinity is not None and affinity.pod_affinity is not None:
        out["podAffinity"] = _affinity_manifest(affinity.pod_affinity)
    if affinity is not None and affinity.pod_anti_affinity is not None:
        out["podAntiAffinity"] = _affinity_manifest(affinity.pod_anti_affinity)
    return out


def read_pod_affinity_manifest(raw: JSONMapping, where: str) -> Affinity | None:
    """`pod_affinity_manifest`'s output back to an Affinity (None for {}). Raises ManifestError."""
    if not raw:
        return None
    r = Reader("stored pod", where)
    aff, anti = raw.get("podAffinity"), raw.get("podAntiAffinity")
    return Affinity(
        pod_affinity=None if aff is None else _pod_affinity(r, aff, "podAffinity"),
        pod_anti_affinity=None if anti is None else _pod_affinity(r, anti, "podAntiAffinity"),
    )
