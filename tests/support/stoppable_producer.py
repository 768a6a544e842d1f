"""A confluent-kafka transactional producer in a process of its own, driven by lines on stdin, so that a test can
SIGSTOP it (a producer paused past its transaction's timeout, as a long GC pause or a stalled VM pauses one) and
resume it with SIGCONT.

    python stoppable_producer.py BOOTSTRAP TRANSACTIONAL_ID TOPIC TRANSACTION_TIMEOUT_MS

It initialises, begins a transaction and prints {"ready": true}. Each line read is a value: produced to
partition 0 of TOPIC inside the transaction and flushed; then one JSON line {"value", "error"} (error: the
delivery error, or null). End of input ends it (no commit, no abort).
"""

from __future__ import annotations

import json
import sys

FLUSH_S = 60


def main(bootstrap: str, tid: str, topic: str, timeout_ms: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": int(timeout_ms)})
    producer.init_transactions(FLUSH_S)
    producer.begin_transaction()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        value, outcome = line.strip(), []
        try:
            producer.produce(topic, value.encode(), partition=0,
                             on_delivery=lambda err, _msg: outcome.append(None if err is None else str(err)))
            producer.flush(FLUSH_S)
        except Exception as exc:  # noqa: BLE001 - a fenced producer may refuse produce() itself: reported
            outcome.append(str(exc))
        print(json.dumps({"value": value, "error": outcome[0] if outcome else "no delivery report"}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
