"""How the cluster commands print: kubectl's tables (aligned columns, state colours on a
terminal, ages as kubectl writes them) and `-o` forms: json and yaml documents, ``name``,
``jsonpath=``/``jsonpath-file=`` templates and ``custom-columns=``, with ``--no-headers`` and
``--sort-by``.

`Listing` is what a `get` found (each kube object with its table row); `print_listing` prints it
the way `Output` says. A listing asked for by one name prints that object, several print a v1
``List`` of them, as kubectl does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

import yaml

from kubus.cli.jsonpath import JSONPathError, Template, parse, relaxed, text_of
from kubus.cli.kube_objects import kube_list
from kubus.core import codec
from kubus.core.codec import JSONList, JSONMapping, JSONObject
from kubus.core.errors import UsageError

__all__ = [
    "DOCUMENT_OUTPUTS",
    "OUTPUT_FORMATS",
    "STATE_COLOURS",
    "Listing",
    "Output",
    "OutputFormats",
    "coloured",
    "format_age",
    "output_of",
    "print_listing",
    "uses_colour",
    "write_document",
    "write_table",
]

DOCUMENT_OUTPUTS = ("json", "yaml")
"""`-o` values that print one document instead of a table."""


def write_document(doc: JSONMapping, out: TextIO, output: str) -> None:
    """``doc`` as pretty JSON or as YAML (``output``: one of DOCUMENT_OUTPUTS), the keys in order."""
    if output == "yaml":
        out.write(yaml.safe_dump(dict(doc), sort_keys=False, allow_unicode=True))
    else:
        out.write(codec.dumps(doc, pretty=True).decode() + "\n")


def write_table(
    rows: Sequence[Sequence[str]], out: TextIO, *, colour_column: int | None = None, header: bool = True
) -> None:
    """Left-aligned columns three spaces apart, as kubectl prints them; the last one unpadded.
    On a terminal (and without NO_COLOR), the cells of ``colour_column`` below the header (the
    first row, unless ``header`` is False) are coloured by what they say (`STATE_COLOURS`);
    aligned first, so colour never shifts a column."""
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    paint = colour_column is not None and uses_colour(out)
    for n, r in enumerate(rows):
        cells = [c.ljust(w) for c, w in zip(r, widths, strict=False)] + [r[-1]]
        if paint and (n > 0 or not header) and colour_column is not None and colour_column < len(cells):
            cells[colour_column] = coloured(cells[colour_column])
        out.write("   ".join(cells).rstrip() + "\n")


STATE_COLOURS = {
    "Running": "32",
    "Succeeded": "32",
    "Bound": "32",
    "Ready": "32",
    "Normal": "32",
    "Pending": "33",
    "Reserved": "33",
    "Waiting": "33",
    "Warning": "33",
    "Failed": "31",
    "NotReady": "31",
    "Unreachable": "31",
    "Deleted": "2",
}
"""ANSI SGR codes by the first word of a state cell: green done or well, yellow on its way or
a warning, red failed or lost, dim gone."""


def uses_colour(out: TextIO) -> bool:
    """Colour only on a terminal, and never with NO_COLOR set (no-color.org)."""
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def coloured(cell: str) -> str:
    """``cell`` in the colour of its first word, padding included; unchanged for an unknown state."""
    word = cell.split(" ", 1)[0].split(",", 1)[0]
    code = STATE_COLOURS.get(word)
    return f"\x1b[{code}m{cell}\x1b[0m" if code else cell


def format_age(seconds: float) -> str:
    """A duration as kubectl's AGE column prints it (apimachinery's ``duration.HumanDuration``,
    two or three significant figures): 5s, 119s, 3m12s, 150m, 2h10m, 20h, 3d4h, 12d, 2y30d,
    9y; a clock up to two seconds behind gives 0s, further behind ``<invalid>``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 120:
        return f"{max(s, 0)}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    if d < 365 * 8:
        return f"{d // 365}y{d % 365}d" if d % 365 else f"{d // 365}y"
    return f"{d // 365}y"



# ---- -o, --no-headers, --sort-by ----------------------------------------------------------------

OUTPUT_FORMATS = ("table", "wide", "json", "yaml", "name")
"""The plain `-o` values; a template follows one of `TEMPLATE_OUTPUTS`."""

TEMPLATE_OUTPUTS = ("jsonpath=", "jsonpath-file=", "custom-columns=")


class OutputFormats(tuple[str, ...]):
    """argparse ``choices`` of `-o`: the plain formats, and any ``jsonpath=TEMPLATE``,
    ``jsonpath-file=FILE`` or ``custom-columns=SPEC`` (completion offers the prefixes)."""

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        return tuple.__contains__(self, value) or value.startswith(TEMPLATE_OUTPUTS)


def output_formats(*formats: str) -> OutputFormats:
    """`-o`'s choices: ``formats`` and the template forms."""
    return OutputFormats((*formats, *TEMPLATE_OUTPUTS))


@dataclass(frozen=True, slots=True)
class Output:
    """How to print a listing (`output_of` reads it from the flags)."""

    format: str = "table"
    """table, wide, json, yaml, name, jsonpath or custom-columns."""
    template: Template | None = None
    """The jsonpath template."""
    columns: tuple[tuple[str, Template], ...] = ()
    """custom-columns: (header, expression) per column."""
    headers: bool = True
    """False with --no-headers: tables without their header line."""
    sort_by: Template | None = None

    @property
    def table(self) -> bool:
        return self.format in ("table", "wide")


def output_of(output: str, *, no_headers: bool = False, sort_by: str | None = None) -> Output:
    """The `Output` of `-o`, `--no-headers` and `--sort-by` values. Raises UsageError for a
    template that does not parse or a file that cannot be read."""
    try:
        order = relaxed(sort_by) if sort_by else None
        if output.startswith("jsonpath="):
            template = parse(output.removeprefix("jsonpath="))
            return Output("jsonpath", template=template, headers=not no_headers, sort_by=order)
        if output.startswith("jsonpath-file="):
            path = output.removeprefix("jsonpath-file=")
            try:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise UsageError(f"-o jsonpath-file={path}: cannot read the file: {e.strerror or e}") from None
            return Output("jsonpath", template=parse(text), headers=not no_headers, sort_by=order)
        if output.startswith("custom-columns="):
            spec = output.removeprefix("custom-columns=")
            columns = []
            for column in spec.split(","):
                name, sep, expression = column.partition(":")
                if not sep or not name or not expression:
                    raise UsageError(
                        f"-o custom-columns: expected NAME:.field.path,..., got {column!r} "
                        "(as in custom-columns=NAME:.metadata.name,NODE:.spec.nodeName)"
                    )
                columns.append((name, relaxed(expression)))
            return Output("custom-columns", columns=tuple(columns), headers=not no_headers, sort_by=order)
    except JSONPathError as e:
        raise UsageError(str(e)) from None
    return Output(output, headers=not no_headers, sort_by=order)


@dataclass(slots=True)
class Listing:
    """What a `get` found: each kube object with its table row, in the order to print them."""

    kind: str
    """The resource's singular name, as `-o name` prints it: pod, node, event."""
    header: list[str]
    rows: list[tuple[JSONObject, list[str]]] = field(default_factory=list)
    colour_column: int | None = None
    single: bool = False
    """Asked for by one name: -o json/yaml/jsonpath print the object itself, not a List."""


def _sort_key(values: JSONList) -> tuple[int, str | int | float]:
    """kubectl's --sort-by order: missing first, then numbers by value, then the rest as text."""
    if not values or values[0] is None:
        return (0, "")
    v = values[0]
    if isinstance(v, bool):
        return (2, str(v).lower())
    if isinstance(v, int | float):
        return (1, v)
    return (2, text_of(v))


def print_listing(listing: Listing, out: TextIO, output: Output, *, empty: str = "") -> None:
    """Print ``listing`` as ``output`` says. ``empty`` (a line for stderr, as kubectl's "No
    resources found") is said instead of an empty table, or an empty name list."""
    rows = listing.rows
    if output.sort_by is not None:
        order = output.sort_by
        rows = sorted(rows, key=lambda row: _sort_key(order.values(row[0])))
    objects = [obj for obj, _ in rows]
    fmt = output.format
    if fmt in ("json", "yaml", "jsonpath"):
        doc = objects[0] if listing.single and len(objects) == 1 else kube_list(objects)
        if fmt == "jsonpath":
            assert output.template is not None
            out.write(output.template.render(doc))
        else:
            write_document(doc, out, fmt)
        return
    if not rows:
        if empty:
            sys.stderr.write(empty + "\n")
        return
    if fmt == "name":
        for obj in objects:
            kind = str(obj.get("kind") or listing.kind).lower()
            out.write(f"{kind}/{obj.get('metadata', {}).get('name', '')}\n")
        return
    if fmt == "custom-columns":
        table = [[name for name, _ in output.columns]] if output.headers else []
        for obj in objects:
            table.append([",".join(text_of(v) for v in t.values(obj)) or "<none>" for _, t in output.columns])
        write_table(table, out)
        return
    table = ([listing.header] if output.headers else []) + [row for _, row in rows]
    write_table(table, out, colour_column=listing.colour_column, header=output.headers)
