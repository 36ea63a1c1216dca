"""deploy/grafana/kubus.json: a Grafana dashboard whose every query reads metrics the services export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kubus.core.metrics import SERVICE_FAMILIES, Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "kubus.json"

_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
}  # fmt: skip
"""PromQL's keywords: identifiers that are not metric names."""


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for panel in panels:
        out.append(panel)
        out.extend(_panels(panel.get("panels", [])))  # a collapsed row holds its own
    return out


def _queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def metric_names(promql: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values(metric, label)``) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)  # label values
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*\w+\s*\)", r"\1", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if not call and name not in _PROMQL_WORDS:
            names.add(name)
    return names


def exported_series() -> set[str]:
    """Every series name some service's /metrics can show: a histogram's _bucket, _sum, _count."""
    series = set()
    for role in SERVICE_FAMILIES:
        for family in Metrics(service=role).registry.collect():
            if family.type == "histogram":
                series |= {f"{family.name}_bucket", f"{family.name}_sum", f"{family.name}_count"}
            elif family.type == "counter":
                series.add(f"{family.name}_total")
            else:
                series.add(family.name)
    return series


def test_metric_names_are_read_from_promql() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, profile) (rate(scheduler_e2e_scheduling_duration_seconds_bucket'
        '{profile=~"$profile"}[$__rate_interval]))) + on (instance) group_left (service) kubus_build_info'
    )
    assert metric_names(expr) == {"scheduler_e2e_scheduling_duration_seconds_bucket", "kubus_build_info"}
    assert metric_names("label_values(scheduler_schedule_attempts_total, profile)") == {
        "scheduler_schedule_attempts_total"
    }


def test_every_query_reads_exported_metrics() -> None:
    dashboard = _dashboard()
    exported = exported_series()
    queries = _queries(dashboard)
    assert queries
    for query in queries:
        names = metric_names(query)
        assert names, f"no metric in {query!r}"
        assert names <= exported, f"{query!r} reads {sorted(names - exported)}, which no service exports"


@pytest.mark.parametrize(
    "needed",
    [
        "scheduler_schedule_attempts_total",  # pods scheduled per second, by result and profile
        "scheduler_e2e_scheduling_duration_seconds_bucket",
        "scheduler_pending_pods",
        "scheduler_binding_duration_seconds_bucket",
        "scheduler_plugin_execution_duration_seconds_bucket",
        "scheduler_cache_size",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ],
)
def test_the_dashboard_shows(needed: str) -> None:
    assert any(needed in metric_names(q) for q in _queries(_dashboard()))


def test_the_dashboard_is_grafana_json() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"] == "kubus"
    panels = _panels(dashboard["panels"])
    assert len({p["id"] for p in panels}) == len(panels), "panel ids are unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0
        if panel["type"] != "row":
            assert panel["targets"] and all(t["refId"] and t["expr"] for t in panel["targets"])
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
