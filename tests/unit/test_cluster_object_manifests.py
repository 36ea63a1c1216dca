"""Namespace, PriorityClass and PodDisruptionBudget documents read by kubus.api.manifests: the
objects, kube's defaults, and one clear line per mistake."""

from __future__ import annotations

import pytest

from kubus.api import ManifestError, ManifestErrors, parse_manifests
from kubus.api.disruption import PodDisruptionBudget
from kubus.api.manifests import wire_pod
from kubus.api.namespaces import NAMESPACE_NAME_LABEL, Namespace
from kubus.api.objects import LabelSelector, LabelSelectorRequirement, PreemptionPolicy, SelectorOperator
from kubus.api.priority import PriorityClass

ALL = """\
apiVersion: v1
kind: Namespace
metadata: {name: ml, labels: {team: vision, kubernetes.io/metadata.name: wrong}}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000000
preemptionPolicy: Never
description: batch that waits
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: default-low}
value: -10
globalDefault: true
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: system-node-critical}
value: 2000001000
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: ml}
spec:
  minAvailable: 50%
  selector:
    matchLabels: {app: web}
    matchExpressions: [{key: tier, operator: NotIn, values: [canary]}]
  unhealthyPodEvictionPolicy: AlwaysAllow
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: all}
spec: {maxUnavailable: 1, selector: {}}
"""


def _error(text: str) -> str:
    with pytest.raises(ManifestError) as info:
        parse_manifests(text, source="objs.yaml")
    assert not isinstance(info.value, ManifestErrors), str(info.value)
    return str(info.value)


def test_the_three_kinds_are_read_with_kubes_defaults() -> None:
    m = parse_manifests(ALL)
    assert m.namespaces == (Namespace("ml", {"team": "vision", NAMESPACE_NAME_LABEL: "ml"}),)
    assert m.priority_classes == (
        PriorityClass("high", 1_000_000, False, PreemptionPolicy.NEVER, "batch that waits"),
        PriorityClass("default-low", -10, global_default=True),
        PriorityClass("system-node-critical", 2_000_001_000),
    )
    assert m.disruption_budgets == (
        PodDisruptionBudget(
            "ml",
            "web",
            LabelSelector({"app": "web"}, (LabelSelectorRequirement("tier", SelectorOperator.NOT_IN, ("canary",)),)),
            min_available="50%",
            unhealthy_pod_eviction_policy="AlwaysAllow",
        ),
        PodDisruptionBudget("default", "all", LabelSelector(), max_unavailable=1),
    )
    assert m.pods == [] and m.nodes == [] and m.pod_groups == ()


def test_a_namespace_always_has_its_name_label() -> None:
    [ns] = parse_manifests("apiVersion: v1\nkind: Namespace\nmetadata: {name: web}\n").namespaces
    assert ns.labels == {NAMESPACE_NAME_LABEL: "web"}
    assert Namespace("web") == ns


def test_a_budget_without_selector_or_numbers_is_kept_as_written() -> None:
    [pdb] = parse_manifests(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: b}\n"
    ).disruption_budgets
    assert pdb == PodDisruptionBudget("default", "b")  # nil selector: selects no pod


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            "kind: Namespace\nmetadata: {name: a.b}\n",
            'objs.yaml: Namespace a.b: metadata.name: "a.b" is not a valid namespace name: a lowercase RFC 1123 label',
        ),
        (
            "kind: Namespace\nmetadata: {name: ml}\nlables: {a: b}\n",
            "objs.yaml: Namespace ml: lables: unknown field (a Namespace has apiVersion, kind, metadata, spec, status)",
        ),
        (
            "kind: Namespace\nmetadata: {name: ml, labels: {team: 'a b'}}\n",
            'objs.yaml: Namespace ml: metadata.labels.team: "a b" is not valid',
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\n",
            "objs.yaml: PriorityClass p: value: is required (an integer)",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\nvalue: '10'\n",
            'objs.yaml: PriorityClass p: value: expected an integer, got string "10"',
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\nvalue: 3000000000\n",
            "objs.yaml: PriorityClass p: value: must be between -2147483648 and 2147483647, inclusive",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\nvalue: 1000000001\n",
            "objs.yaml: PriorityClass p: value: maximum allowed value of a user defined priority is 1000000000",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: system-mine}\nvalue: 5\n",
            "objs.yaml: PriorityClass system-mine: metadata.name: priority class names with 'system-' prefix are "
            "reserved for system use only. error: system-mine is not a known system priority class",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: system-cluster-critical}\nvalue: 5\n",
            "objs.yaml: PriorityClass system-cluster-critical: metadata.name: priority class names with 'system-' "
            "prefix are reserved for system use only. error: value of system-cluster-critical PriorityClass must "
            "be 2000000000",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: system-cluster-critical}\nvalue: 2000000000\nglobalDefault: true\n",
            "objs.yaml: PriorityClass system-cluster-critical: metadata.name: priority class names with 'system-' "
            "prefix are reserved for system use only. error: globalDefault of system-cluster-critical "
            "PriorityClass must be false",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\nvalue: 1\npreemptionPolicy: Sometimes\n",
            'objs.yaml: PriorityClass p: preemptionPolicy: unsupported value "Sometimes" '
            "(supported: PreemptLowerPriority, Never)",
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\nvalue: 1\nglobalDefault: yes please\n",
            'objs.yaml: PriorityClass p: globalDefault: expected true or false, got string "yes please"',
        ),
        (
            "kind: PriorityClass\nmetadata: {name: p}\nvalue: 1\nglobaldefault: true\n",
            "objs.yaml: PriorityClass p: globaldefault: unknown field (a PriorityClass has apiVersion, kind, "
            "metadata, value, globalDefault, description, preemptionPolicy)",
        ),
        (
            "apiVersion: scheduling.k8s.io/v1beta1\nkind: PriorityClass\nmetadata: {name: p}\nvalue: 1\n",
            'objs.yaml: PriorityClass p: apiVersion: "scheduling.k8s.io/v1beta1" is not supported for '
            "PriorityClass (want scheduling.k8s.io/v1)",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailable: 1, maxUnavailable: 1}\n",
            "objs.yaml: PodDisruptionBudget default/b: spec: minAvailable and maxUnavailable cannot be both set",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailable: -1}\n",
            "objs.yaml: PodDisruptionBudget default/b: spec.minAvailable: -1: must be greater than or equal to 0",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {maxUnavailable: '150%'}\n",
            'objs.yaml: PodDisruptionBudget default/b: spec.maxUnavailable: "150%": must not be greater than 100%',
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailable: 'half'}\n",
            'objs.yaml: PodDisruptionBudget default/b: spec.minAvailable: "half": a valid percent string must be '
            "a numeric string followed by an ending '%' (e.g. '1%',  or '93%')",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailable: '5'}\n",
            'objs.yaml: PodDisruptionBudget default/b: spec.minAvailable: "5": a valid percent string',
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailable: 1.5}\n",
            "objs.yaml: PodDisruptionBudget default/b: spec.minAvailable: must be an integer or percentage "
            "(e.g '5%'), got number 1.5",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {minAvailible: 1}\n",
            "objs.yaml: PodDisruptionBudget default/b: spec.minAvailible: unknown field (a PodDisruptionBudget spec "
            "has selector, minAvailable, maxUnavailable, unhealthyPodEvictionPolicy)",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {selector: {matchExpressions: [{key: a, "
            "operator: In}]}}\n",
            "objs.yaml: PodDisruptionBudget default/b: spec.selector.matchExpressions[0].values:",
        ),
        (
            "kind: PodDisruptionBudget\nmetadata: {name: b}\nspec: {unhealthyPodEvictionPolicy: Never}\n",
            'objs.yaml: PodDisruptionBudget default/b: spec.unhealthyPodEvictionPolicy: unsupported value "Never" '
            "(supported: IfHealthyBudget, AlwaysAllow)",
        ),
        (
            "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: b}\n",
            'objs.yaml: PodDisruptionBudget default/b: apiVersion: "policy/v1beta1" is not supported for '
            "PodDisruptionBudget (want policy/v1)",
        ),
    ],
)
def test_mistakes_are_one_line_naming_the_object_and_field(doc: str, message: str) -> None:
    assert _error(doc).startswith(message)


def test_a_second_global_default_in_one_load_is_refused() -> None:
    two = (
        "kind: PriorityClass\nmetadata: {name: a}\nvalue: 1\nglobalDefault: true\n---\n"
        "kind: PriorityClass\nmetadata: {name: b}\nvalue: 2\nglobalDefault: true\n"
    )
    assert _error(two) == (
        "objs.yaml: PriorityClass b: globalDefault: PriorityClass a is already marked as default. Only one default "
        "can exist"
    )


@pytest.mark.parametrize(
    ("kind", "extra", "label", "noun"),
    [
        ("Namespace", "", "Namespace x", "namespace"),
        ("PriorityClass", "value: 1\n", "PriorityClass x", "priority class"),
        ("PodDisruptionBudget", "", "PodDisruptionBudget default/x", "budget"),
    ],
)
def test_the_same_object_twice_is_refused(kind: str, extra: str, label: str, noun: str) -> None:
    doc = f"kind: {kind}\nmetadata: {{name: x}}\n{extra}"
    assert _error(doc + "---\n" + doc) == (
        f"objs.yaml: {label}: metadata.name: duplicate: the same {noun} is already defined in document 1"
    )


def test_json_lists_carry_the_new_kinds() -> None:
    text = (
        '{"apiVersion": "v1", "kind": "List", "items": ['
        '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}},'
        '{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "p"}, "value": 7}]}'
    )
    m = parse_manifests(text)
    assert m.namespaces == (Namespace("a"),) and m.priority_classes == (PriorityClass("p", 7),)


def test_a_wire_pod_is_one_pod_and_nothing_else() -> None:
    pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: p, uid: u}\nspec: {containers: [{name: c}]}\n"
    assert wire_pod(pod, "u", "default/p").name == "p"
    with pytest.raises(ValueError, match="1 other object"):
        wire_pod(pod + "---\nkind: Namespace\nmetadata: {name: a}\n", "u", "default/p")
