"""Pod affinity terms as kube-scheduler resolves them (framework.AffinityTerm), and label selectors.

A pod's podAffinity / podAntiAffinity terms are resolved once per pod (`PodAffinityTerms.of`):
the namespaces a term looks in (the pod's own when the term names none and has no
namespaceSelector), its label selector with `matchLabelKeys` / `mismatchLabelKeys` merged in (kube's
apiserver merges them at pod creation: ``key in (value)`` / ``key notin (value)`` for each key the
pod has), and its namespaceSelector. `AffinityTerm.matches` is kube's AffinityTerm.Matches.

Selectors follow metav1.LabelSelectorAsSelector: a nil selector matches nothing, an empty one
everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kubus.api._pods import pod_affinity_manifest, read_pod_affinity_manifest, selector_manifest
from kubus.api.objects import LabelSelector, LabelSelectorRequirement, Pod, PodAffinityTerm, SelectorOperator


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels): None matches nothing."""
    if selector is None:
        return False
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    return all(requirement_matches(req, labels) for req in selector.match_expressions)


def requirement_matches(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """One matchExpressions entry (In, NotIn, Exists, DoesNotExist) against a label set."""
    value = labels.get(req.key)
    op = req.operator
    if op is SelectorOperator.IN:
        return value is not None and value in req.values
    if op is SelectorOperator.NOT_IN:
        return value is None or value not in req.values
    if op is SelectorOperator.EXISTS:
        return value is not None
    if op is SelectorOperator.DOES_NOT_EXIST:
        return value is None
    return False  # Gt/Lt are node-selector operators; a label selector never has them


def selector_key(selector: LabelSelector | None) -> tuple[object, ...] | None:
    """A hashable, canonical form of a selector (for caches and grouping)."""
    if selector is None:
        return None
    return (
        tuple(sorted(selector.match_labels.items())),
        tuple((r.key, r.operator.value, tuple(r.values)) for r in selector.match_expressions),
    )


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """kube's framework.AffinityTerm: one resolved podAffinityTerm."""

    namespaces: frozenset[str]
    selector: LabelSelector | None
    topology_key: str
    namespace_selector: LabelSelector | None
    """None matches no namespace (kube's labels.Nothing for a nil namespaceSelector)."""

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one this term selects."""
        if namespace in self.namespaces or selector_matches(self.namespace_selector, namespace_labels):
            return selector_matches(self.selector, labels)
        return False

    @property
    def key(self) -> tuple[object, ...]:
        """Hashable identity (the selectors hold dicts)."""
        return (
            tuple(sorted(self.namespaces)),
            selector_key(self.selector),
            self.topology_key,
            selector_key(self.namespace_selector),
        )

    @classmethod
    def of(cls, pod: Pod, term: PodAffinityTerm) -> AffinityTerm:
        namespaces = (
            frozenset([pod.namespace])
            if not term.namespaces and term.namespace_selector is None
            else frozenset(term.namespaces)
        )
        return cls(namespaces, _merged_selector(pod, term), term.topology_key, term.namespace_selector)


@dataclass(frozen=True, slots=True)
class WeightedAffinityTerm:
    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodAffinityTerms:
    """A pod's resolved affinity terms (kube's PodInfo.Required/PreferredAffinityTerms...)."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedAffinityTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedAffinityTerm, ...] = ()

    @classmethod
    def of(cls, pod: Pod) -> PodAffinityTerms | None:
        """The pod's terms; None when it has no podAffinity and no podAntiAffinity."""
        affinity = pod.spec.affinity
        if affinity is None or (affinity.pod_affinity is None and affinity.pod_anti_affinity is None):
            return None
        aff, anti = affinity.pod_affinity, affinity.pod_anti_affinity
        terms = cls(
            required_affinity=tuple(AffinityTerm.of(pod, t) for t in aff.required) if aff else (),
            required_anti_affinity=tuple(AffinityTerm.of(pod, t) for t in anti.required) if anti else (),
            preferred_affinity=(
                tuple(WeightedAffinityTerm(AffinityTerm.of(pod, w.pod_affinity_term), w.weight) for w in aff.preferred)
                if aff
                else ()
            ),
            preferred_anti_affinity=(
                tuple(WeightedAffinityTerm(AffinityTerm.of(pod, w.pod_affinity_term), w.weight) for w in anti.preferred)
                if anti
                else ()
            ),
        )
        return terms if terms != cls() else None


def _merged_selector(pod: Pod, term: PodAffinityTerm) -> LabelSelector | None:
    """The term's labelSelector with matchLabelKeys / mismatchLabelKeys merged (apiserver's
    job in kube; kubus has no apiserver, so it is done where the terms are resolved)."""
    selector = term.label_selector
    if selector is None or not (term.match_label_keys or term.mismatch_label_keys):
        return selector
    extra = [
        LabelSelectorRequirement(key, SelectorOperator.IN, (pod.metadata.labels[key],))
        for key in term.match_label_keys
        if key in pod.metadata.labels
    ] + [
        LabelSelectorRequirement(key, SelectorOperator.NOT_IN, (pod.metadata.labels[key],))
        for key in term.mismatch_label_keys
        if key in pod.metadata.labels
    ]
    return LabelSelector(dict(selector.match_labels), selector.match_expressions + tuple(extra))


__all__ = [
    "AffinityTerm",
    "PodAffinityTerms",
    "WeightedAffinityTerm",
    "pod_affinity_manifest",
    "read_pod_affinity_manifest",
    "requirement_matches",
    "selector_key",
    "selector_manifest",
    "selector_matches",
]
