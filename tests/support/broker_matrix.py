"""The API x version x client matrix of issue 3: collected from brokers during the run, printed at its end.

Interop tests call `record(broker.api_matrix())` (tests/support/cluster.py); `tests/conftest.py`'s
`pytest_terminal_summary` prints `format_table()` (under pytest-xdist each worker `export()`s its part at
the end of its session and the controller merges them): one row per API, one column per client, each cell the
versions that client was served (and `!v` for an ApiVersions version it asked for and was refused), and a last
column, "codec-only": the versions we advertise that no real client was served in the run, which only the
codec's own tests (round trips, the kafka-python and aiokafka oracles) exercise.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict

# client -> api -> versions, merged over every broker and test of the run
_SERVED: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
_REFUSED: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
MAX_COLUMN = 40
_TAG = re.compile(r"-t[0-9a-f]{8}$")  # a test's own tag on its clients' names (new_tag), dropped here


def new_tag() -> str:
    return "t" + uuid.uuid4().hex[:8]


def record(matrix: dict) -> None:
    """Merge one broker's `{"served": {client: {api: [v]}}, "refused": {...}}` into the run's matrix."""
    for table, into in ((matrix.get("served", {}), _SERVED), (matrix.get("refused", {}), _REFUSED)):
        for client, apis in table.items():
            for api, versions in apis.items():
                into[_TAG.sub("", client)][api].update(versions)


def export() -> dict:
    """This process's matrix as plain JSON-able data: an xdist worker hands it to the controller, which
    `record()`s it (tests/conftest.py)."""
    return {name: {client: {api: sorted(v) for api, v in apis.items()} for client, apis in table.items()}
            for name, table in (("served", _SERVED), ("refused", _REFUSED))}


def served() -> dict[str, dict[str, set[int]]]:
    return {client: dict(apis) for client, apis in _SERVED.items()}


def versions_text(versions) -> str:
    """[3, 4, 5, 7] -> "3-5,7"."""
    out, run = [], []
    for v in sorted(versions):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(_run_text(run))
        run = [v]
    if run:
        out.append(_run_text(run))
    return ",".join(out)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def format_table() -> list[str]:
    """Lines of a plain-text table; [] when nothing was recorded."""
    clients = sorted(set(_SERVED) | set(_REFUSED))
    if not clients:
        return []
    apis = sorted({api for table in (_SERVED, _REFUSED) for c in clients for api in table.get(c, {})})
    advertised = _advertised()
    apis = sorted(set(apis) | set(advertised))
    header = ["API"] + [c[:MAX_COLUMN] for c in clients] + ["codec-only"]
    rows = [header]
    for api in apis:
        row = [api]
        exercised = {v for client in clients for v in _SERVED.get(client, {}).get(api, ())}
        for client in clients:
            cell = versions_text(_SERVED.get(client, {}).get(api, ()))
            refused = _REFUSED.get(client, {}).get(api)
            if refused:
                cell = ",".join(filter(None, [cell] + [f"!{v}" for v in sorted(refused)]))
            row.append(cell or "-")
        lo, hi = advertised.get(api, (0, -1))
        row.append(versions_text(set(range(lo, hi + 1)) - exercised) or "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _advertised() -> dict[str, tuple[int, int]]:
    """{api name: (lowest, highest)} of the versions the broker advertises."""
    from sparklog.broker.network.dispatch import api_name
    from sparklog.protocol.registry import API_VERSIONS

    return {api_name(key): rng for key, rng in API_VERSIONS.items()}
