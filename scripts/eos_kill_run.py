"""The exactly-once Spark sink under driver SIGKILLs, longer than the suite's run (test_datasource_exactly_once).

    python scripts/eos_kill_run.py [--rounds 6] [--rows 300] [--seed N] [--base-dir DIR]

Three brokers (`LocalCluster`, transaction settings of support/transactions.py, RF 3). Each round takes fresh
topics, produces `--rows` rows and runs an exactly-once query sparklog -> sparklog (100 rows per micro-batch)
in a driver process of its own (support/eos_query.py), SIGKILLed once: rounds cycle through the stops of a
batch's commit ("before" the decision, "deciding", "after" it) at a random batch, and every fourth round is
killed at a random moment instead. The query is restarted from its checkpoint until it completes; then a
read_committed reader must find every input row exactly once. The first round also runs an at-least-once
query killed after its commit, which must show duplicates (the check can see them).
One line per round, PASS or FAIL; exit status 0 when every round passes. Every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from support.eos_kill import duplicates_and_losses, produce_input, run_with_kill  # noqa: E402
from support.transactions import TXN_SETTINGS  # noqa: E402

STOPS = ("before", "deciding", "after")
PER_TRIGGER = 100


def _topics(cluster, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for future in admin.create_topics([NewTopic(n, 2, 3) for n in names]).values():
        future.result(60)


def one_round(cluster, base: Path, number: int, rng: random.Random, rows: int) -> tuple[bool, str]:
    tag = uuid.uuid4().hex[:6]
    names = [f"in{tag}", f"out{tag}", f"ain{tag}", f"aout{tag}"]
    _topics(cluster, *names)
    batches = max(1, rows // PER_TRIGGER)
    kill_after = rng.uniform(15, 120) if number % 4 == 3 else None
    batch, stop = rng.randrange(batches), "none" if kill_after else STOPS[number % len(STOPS)]
    queries = [(names[0], names[1], "exactly-once", f"eos-{tag}", stop)]
    if number == 0:
        queries.append((names[2], names[3], "at-least-once", "unused", "after"))
    eos_rows = produce_input(cluster.bootstrap, names[0], rows)
    alo_rows = produce_input(cluster.bootstrap, names[2], rows) if number == 0 else []
    run_with_kill(cluster.bootstrap, base / f"round{number}", queries, batch=batch, kill_after_s=kill_after)
    duplicated, lost = duplicates_and_losses(cluster, names[1], eos_rows)
    what = f"killed after {kill_after:.0f} s" if kill_after else f"killed at {stop!r} of batch {batch}"
    ok = not duplicated and not lost
    detail = f"{what}: {len(duplicated)} duplicated, {len(lost)} lost of {rows}"
    if number == 0:
        alo_duplicated, alo_lost = duplicates_and_losses(cluster, names[3], alo_rows)
        ok = ok and bool(alo_duplicated) and not alo_lost
        detail += f"; at-least-once control: {len(alo_duplicated)} duplicated (must be > 0), {len(alo_lost)} lost"
    return ok, detail


def main(argv=None) -> int:
    from sparklog.broker.launcher import LocalCluster

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--base-dir")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    base = Path(args.base_dir or tempfile.mkdtemp(prefix="sparklog-eos-"))
    print(f"seed {seed}, work in {base}", flush=True)
    results = []
    with LocalCluster(base / "cluster", brokers=3, overrides=dict(TXN_SETTINGS)) as cluster:
        for number in range(args.rounds):
            ok, detail = one_round(cluster, base, number, rng, args.rows)
            print(f"{'PASS' if ok else 'FAIL'} round {number}: {detail}", flush=True)
            results.append(ok)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
