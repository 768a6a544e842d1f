"""What both forms of `sparklog topics` (through ZooKeeper, topics.py; through the Admin API, topics_admin.py)
read and judge alike: topic config overrides, kafka-topics' --replica-assignment, and a partition's status."""

from __future__ import annotations


def checked_overrides(overrides: dict[str, str]) -> dict[str, str]:
    """`overrides` if the storage accepts them as topic configs; else ValueError naming the bad one."""
    from sparklog.storage.config import LogConfig

    LogConfig.from_dict(overrides)
    return overrides


def parse_replica_assignment(text: str) -> dict[int, tuple[int, ...]]:
    """`"1:2,2:3"` -> `{0: (1, 2), 1: (2, 3)}` (kafka-topics.sh's --replica-assignment)."""
    try:
        return {p: tuple(int(b) for b in part.split(":")) for p, part in enumerate(text.split(","))}
    except ValueError:
        raise ValueError(f"--replica-assignment {text!r} is not broker ids joined by ':' and ','") from None


def partition_status(replicas, state, live, silent=frozenset()) -> str:
    """"offline" (no live leader), "unreachable" (its leader is registered but did not answer: `silent`),
    "under-replicated" (live ISR smaller than the replicas) or "ok"."""
    if state is None or state.leader not in live:
        return "offline"
    if state.leader in silent:
        return "unreachable"
    if len([b for b in state.isr if b in live]) < len(replicas):
        return "under-replicated"
    return "ok"
