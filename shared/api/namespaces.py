"""Namespace (v1): its labels, which namespaceSelectors (InterPodAffinity) match.

A namespace nobody applied exists all the same (as kube's ``default`` and ``kube-system`` do):
it has only the label the apiserver gives every namespace, ``kubernetes.io/metadata.name:
<name>``. `namespace_labels` is the one lookup plugins use, applied or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["NAMESPACE_NAME_LABEL", "Namespace", "namespace_labels"]

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Set by the apiserver on every namespace, to its name (it overwrites any other value)."""


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    """Always carries ``kubernetes.io/metadata.name: <name>``: it is added (or corrected) on
    construction, as the apiserver does on create."""

    def __post_init__(self) -> None:
        if self.labels.get(NAMESPACE_NAME_LABEL) != self.name:
            object.__setattr__(self, "labels", {**self.labels, NAMESPACE_NAME_LABEL: self.name})


def namespace_labels(namespaces: Mapping[str, Mapping[str, str]], namespace: str) -> Mapping[str, str]:
    """The labels of ``namespace`` (name -> labels as the cluster records them): those recorded,
    and always ``kubernetes.io/metadata.name``; just that label for a namespace not recorded."""
    labels = namespaces.get(namespace)
    if labels is None:
        return {NAMESPACE_NAME_LABEL: namespace}
    if labels.get(NAMESPACE_NAME_LABEL) == namespace:
        return labels
    return {**labels, NAMESPACE_NAME_LABEL: namespace}
