"""A running broker's Prometheus endpoint, read as a test reads it: where the broker's run said it listens, one
scrape parsed by prometheus_client's own parser, and the sum of one metric's samples."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

ENDPOINT = re.compile(r"metrics endpoint on (http://[^/\s]+/metrics)")
SCRAPE_TIMEOUT_S = 10  # a scrape must answer (never hang): generous for a loaded machine


def metrics_url(broker) -> str:
    """The endpoint the broker's current run logged (port 0: the system picked it)."""
    return ENDPOINT.findall(broker.out_path.read_text(errors="replace"))[-1]


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape."""
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def total(broker, name: str, **labels) -> float:
    """The sum of `name`'s samples whose labels include `labels`, scraped from `broker` now."""
    wanted = set(labels.items())
    return sum(v for (sample, have), v in scrape(metrics_url(broker)).items() if sample == name and wanted <= set(have))
