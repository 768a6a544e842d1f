"""docs/grafana/sparklog.json: loaded, checked against the part of Grafana's dashboard model it uses (a JSON
Schema: every panel placed on the grid, every query a Prometheus `expr` with its refId), and the metric names
its queries use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "sparklog.json"
METRIC = re.compile(r"\bsparklog_[a-z0-9_]+\b")

_GRID = {"type": "object", "required": ["h", "w", "x", "y"],
         "properties": {k: {"type": "integer", "minimum": 0} for k in ("h", "w", "x", "y")}}
_DATASOURCE = {"type": "object", "required": ["type", "uid"], "properties": {"type": {"const": "prometheus"}}}
_TARGET = {"type": "object", "required": ["refId", "expr", "datasource"],
           "properties": {"refId": {"type": "string", "pattern": "^[A-Z]$"}, "expr": {"type": "string", "minLength": 1},
                          "datasource": _DATASOURCE, "legendFormat": {"type": "string"}}}
_PANEL = {"type": "object", "required": ["id", "type", "title", "gridPos"],
          "properties": {"id": {"type": "integer"}, "title": {"type": "string", "minLength": 1}, "gridPos": _GRID,
                         "type": {"enum": ["row", "timeseries", "stat"]}},
          "if": {"properties": {"type": {"const": "row"}}},
          "else": {"required": ["datasource", "targets"],
                   "properties": {"datasource": _DATASOURCE,
                                  "targets": {"type": "array", "minItems": 1, "items": _TARGET}}}}
SCHEMA = {"type": "object", "required": ["title", "uid", "schemaVersion", "panels", "templating", "time"],
          "properties": {"title": {"type": "string"}, "uid": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"},
                         "schemaVersion": {"type": "integer", "minimum": 30},
                         "panels": {"type": "array", "minItems": 1, "items": _PANEL}}}


def load_dashboard(path: Path = DASHBOARD) -> dict:
    """The dashboard, parsed and schema-checked (jsonschema.ValidationError names what is wrong)."""
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.validate(dashboard, SCHEMA)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    return dashboard


def dashboard_metric_names(dashboard: dict) -> set[str]:
    """Every sparklog_ series name the panels' queries use."""
    return {name for panel in dashboard["panels"] for target in panel.get("targets", ())
            for name in METRIC.findall(target["expr"])}


def exposed_names(families) -> set[str]:
    """The series names prometheus_client's parser families stand for (a counter's `_total`, a histogram's
    `_bucket`, `_sum`, `_count`), present in the exposition even without a sample."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {family.name + suffix for family in families for suffix in suffixes.get(family.type, ("",))}
