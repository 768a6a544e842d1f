"""Kafka's tools' table: left-aligned plain columns, two spaces apart, never wrapped or cut at the terminal's width."""

from __future__ import annotations

NO_VALUE = "-"


def print_columns(headers: tuple[str, ...], rows: list[tuple]) -> None:
    """Left-aligned columns as Kafka's tools print them; None and "" show as "-"."""
    cells = [tuple(headers)] + [tuple(NO_VALUE if v is None or v == "" else str(v) for v in row) for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
