"""Vectorized building blocks shared by the plugins: label, node-name and selector masks.

A label rule is decided once per distinct value of the label (its interned vocabulary) and the
answers are gathered over the rows, so rules stay scalar (`kubus.api.matching`) and cost
O(distinct values + rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from kubus.api.matching import requirement_matches, term_is_valid
from kubus.api.objects import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, SelectorOperator
from kubus.framework.interface import Rows
from kubus.kernels.backend import Array, ArrayModule
from kubus.kernels.node_table import TableView


def _n(view: TableView, rows: Rows) -> int:
    return int(view.valid[rows].shape[0])


def requirement_mask(view: TableView, req: NodeSelectorRequirement, rows: Rows) -> Array:
    """bool per row: the node's label `req.key` satisfies `req`."""
    xp = view.xp
    col = view.label(req.key)
    if col is None:
        return xp.full(_n(view, rows), requirement_matches(req, None), dtype=bool)
    vocab = view.table.label_values[req.key]
    lut = np.zeros(len(vocab), dtype=bool)
    op = req.operator
    if op in (SelectorOperator.IN, SelectorOperator.NOT_IN):
        ids = [vocab.ids[v] for v in req.values if v in vocab.ids]
        lut[ids] = True
        if op is SelectorOperator.NOT_IN:
            lut = ~lut
        lut[0] = requirement_matches(req, None)
    elif op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST):
        lut[1:] = op is SelectorOperator.EXISTS
        lut[0] = op is SelectorOperator.DOES_NOT_EXIST
    else:  # Gt / Lt: decided per distinct value
        lut[:] = [requirement_matches(req, v) for v in vocab.values]
    return xp.asarray(lut)[col[rows]]


def node_name_mask(view: TableView, names: Iterable[str], rows: Rows) -> Array:
    """bool per row: the node's name is in `names`."""
    mask = np.zeros(view.table.rows, dtype=bool)
    row_of = view.table.row_of
    mask[[row_of[n] for n in names if n in row_of]] = True
    return view.xp.asarray(mask)[rows]


def term_mask(view: TableView, term: NodeSelectorTerm, rows: Rows) -> Array:
    """kube's NodeSelectorTerm match over rows; an empty or unparsable term matches nothing."""
    xp = view.xp
    n = _n(view, rows)
    if (not term.match_expressions and not term.match_fields) or not term_is_valid(term):
        return xp.zeros(n, dtype=bool)
    mask = xp.ones(n, dtype=bool)
    for req in term.match_expressions:
        mask &= requirement_mask(view, req, rows)
    for req in term.match_fields:
        names = node_name_mask(view, req.values, rows)
        mask &= names if req.operator is SelectorOperator.IN else ~names
    return mask


def selector_mask(view: TableView, selector: NodeSelector, rows: Rows) -> Array:
    """Terms ORed; no terms matches nothing."""
    mask = view.xp.zeros(_n(view, rows), dtype=bool)
    for term in selector.node_selector_terms:
        mask |= term_mask(view, term, rows)
    return mask


def labels_mask(view: TableView, required: Mapping[str, str], rows: Rows) -> Array:
    """spec.nodeSelector over rows: every key present with an equal value."""
    mask = view.xp.ones(_n(view, rows), dtype=bool)
    for key, value in required.items():
        mask &= requirement_mask(view, NodeSelectorRequirement(key, SelectorOperator.IN, (value,)), rows)
    return mask


def go_div(xp: ArrayModule, a: Array, b: Array) -> Array:
    """Go's integer division (truncates toward zero) for int64 arrays; b must be non-zero."""
    q = xp.abs(a) // xp.abs(b)
    return xp.where((a < 0) != (b < 0), -q, q)
