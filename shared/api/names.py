"""Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation): DNS labels and subdomains,
qualified names (label keys, resource names) and label values.

Each `*_error` function returns None for a valid name, else what is wrong in kube's words.
"""

from __future__ import annotations

import re
from functools import lru_cache

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def dns1123_label_error(text: str) -> str | None:
    if len(text) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.fullmatch(text):
        return (
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
            "'-', and must start and end with an alphanumeric character"
        )
    return None


def dns1123_subdomain_error(text: str) -> str | None:
    if len(text) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(text):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        )
    return None


@lru_cache(maxsize=4096)
def qualified_name_error(text: str) -> str | None:
    """IsQualifiedName: an optional DNS subdomain prefix and '/', then a name of <= 63 chars."""
    prefix, slash, name = text.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        if dns1123_subdomain_error(prefix):
            return f"prefix part {dns1123_subdomain_error(prefix)}"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character"
        )
    return None


@lru_cache(maxsize=4096)
def label_value_error(text: str) -> str | None:
    """IsValidLabelValue: empty, or <= 63 of [-A-Za-z0-9_.] starting and ending alphanumeric."""
    if len(text) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.fullmatch(text):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', "
            "'_' or '.', and must start and end with an alphanumeric character"
        )
    return None


def is_qualified_name(text: str) -> bool:
    return qualified_name_error(text) is None


def is_valid_label_value(text: str) -> bool:
    return label_value_error(text) is None
