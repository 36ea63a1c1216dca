"""Errors for bad input: which file, which object, which field, and what is wrong with it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kubus.core.errors import KubusError


class ManifestError(KubusError):
    """A manifest the user wrote is wrong. `str()` is one line, e.g.::

        pods.yaml: Pod default/web-1: spec.containers[0].resources.requests.cpu: quantity "abc" is not valid

    Attributes:
        source: the file name as given, or "<stdin>".
        obj: the object, "Pod default/web-1" or "Node gpu-1"; "document 3" (1-based, counting
            every `---` document of the file) when the object has no usable name yet; "" when
            the error is about the whole file.
        field: the field path in kube's notation, `spec.tolerations[2].effect`, with map keys
            that are not plain identifiers in brackets: `metadata.annotations[kubus.io/gpus]`;
            "" when the error is about the whole object or file.
        reason: what is wrong, in words.
    """

    def __init__(self, source: str, obj: str, field: str, reason: str) -> None:
        super().__init__(source, obj, field, reason)
        self.source = source
        self.obj = obj
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return ": ".join(part for part in (self.source, self.obj, self.field, self.reason) if part)


class ManifestErrors(ManifestError):
    """Several ManifestErrors from one load, in file order; `str()` is one line per error.

    It is a ManifestError itself (carrying the first error's attributes), so `except
    ManifestError` catches one error and many alike.
    """

    def __init__(self, errors: Sequence[ManifestError]) -> None:
        if not errors:
            raise ValueError("ManifestErrors needs at least one error")
        first = errors[0]
        super().__init__(first.source, first.obj, first.field, first.reason)
        self.args = (tuple(errors),)
        self.errors: tuple[ManifestError, ...] = tuple(errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)

    def __iter__(self) -> Iterator[ManifestError]:
        return iter(self.errors)

    def __len__(self) -> int:
        return len(self.errors)
