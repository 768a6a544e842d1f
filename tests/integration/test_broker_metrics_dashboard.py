"""docs/grafana/sparklog.json and docs/metrics.md against a real broker's endpoint (issue 27): the dashboard is
schema-checked, every query names only series the endpoint exports, and every series exported is documented."""

from __future__ import annotations

import re
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.cluster import Cluster

from support.broker_metrics import SCRAPE_TIMEOUT_S, metrics_url

pytestmark = pytest.mark.slow


def test_the_dashboard_loads_and_its_queries_name_exported_metrics(zookeeper, tmp_path):
    """docs/grafana/sparklog.json is schema-checked and every panel's expr names only series a broker's
    endpoint exports (a family is in the exposition even before its first sample)."""
    from support.dashboard import dashboard_metric_names, exposed_names, load_dashboard

    dashboard = load_dashboard()
    with Cluster(f"{zookeeper.connect_string}/dash-{uuid.uuid4().hex}", tmp_path, brokers=1,
                 overrides={"metrics.listener": "http://127.0.0.1:0"}) as cluster:
        with urllib.request.urlopen(metrics_url(cluster.brokers[1]), timeout=SCRAPE_TIMEOUT_S) as reply:
            families = list(text_string_to_metric_families(reply.read().decode()))
    used = dashboard_metric_names(dashboard)
    missing = sorted(used - exposed_names(families))
    assert not missing, f"the dashboard queries series no broker exports: {missing}"
    assert len(used) >= 30
    documented = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    undocumented = sorted(f.name for f in families if f.name.startswith("sparklog_")
                          and not re.search(rf"`{f.name}(_total)?`", documented))
    assert not undocumented, f"docs/metrics.md does not document {undocumented}"
