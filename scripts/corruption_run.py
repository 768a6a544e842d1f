"""The corruption run of issue 14: random damage to a partition log's files, then a full read-back.

Each trial (tests/support/corruption.py) builds a log of several segments, damages one file — flips a
byte, zeroes a 4 KB page or truncates it, in any segment's .log, .index or .timeindex — either after a
clean shutdown (found before first use) or under a running log (found by the scrubber's pass), then reads
every offset back. It fails when a reader receives a batch whose CRC fails or that is not the batch
written at its offset, when a batch the damage did not touch is not served, or when the log end moves back.

    .venv/bin/python scripts/corruption_run.py --trials 1000 --seed 1 --deadline-s 900

Exit status 0 only if every trial passed and all `--trials` ran before the deadline.
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from support.corruption import run_trial  # noqa: E402
from sparklog.storage import Flusher  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--deadline-s", type=float, default=900, help="stop after this many seconds")
    args = parser.parse_args()
    logging.basicConfig(level=logging.CRITICAL)  # each trial logs its DATA LOSS error on purpose
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.deadline_s
    counts, failures, fenced, done = collections.Counter(), [], 0, 0
    flusher = Flusher("corruption-run")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            while done < args.trials and time.monotonic() < deadline:
                trial = run_trial(rng, os.path.join(tmp, f"t-{done}"), flusher)
                done += 1
                file_kind = trial.path.rsplit(".", 1)[-1]
                counts[(trial.mode, trial.kind, file_kind)] += 1
                fenced += bool(trial.fenced)
                if not trial.ok:
                    failures.append(trial)
                    print(f"FAIL trial {done - 1}: {trial}", flush=True)
    finally:
        flusher.close()
    print(f"seed {args.seed}: {done} trials, {len(failures)} failed, {fenced} fenced a damaged range")
    for key, n in sorted(counts.items()):
        print(f"  {' '.join(key):32s} {n}")
    if done < args.trials:
        print(f"stopped at the deadline after {done} of {args.trials} trials")
    return 0 if not failures and done >= args.trials else 1


if __name__ == "__main__":
    sys.exit(main())
