"""Run the query of support/eos_query.py, SIGKILL its driver (its process group: the JVM and the Python
workers too) at a chosen stop or after a delay, restart it from its checkpoint until it completes, and count
what a read_committed reader finds in the output. `run_with_executor_kills` runs it on local-cluster and
SIGKILLs the executor JVM of a task stopped mid-batch instead (the driver lives on, Spark retries the task).

Rule: every process started here is killed or has exited when `run_with_kill` returns; each driver's group
is watched without being reaped until it is killed (processes.py Rule: signal-before-reap).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from support.processes import exited, kill_group, wait_exited
from support.transactions import read_values

REPO = Path(__file__).resolve().parents[2]
QUERY = Path(__file__).with_name("eos_query.py")
RUN_TIMEOUT_S = 300


def produce_input(bootstrap: str, topic: str, count: int) -> list[str]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    values = [f"row-{i:05d}" for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=i % 2)
    assert producer.flush(60) == 0
    return values


def _start(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(QUERY), *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)


def run_with_kill(bootstrap: str, workdir: Path, queries: list[tuple[str, str, str, str, str]], batch: int = 0,
                  kill_after_s: float | None = None) -> None:
    """The `queries` ((input, output, guarantee, prefix, stop), eos_query.py's) in one driver process, SIGKILLed
    once every query is at its stop of `batch` (or `kill_after_s` after the start), then run again without
    stops until they complete. Raises with the log's tail if a run fails or never reaches its stops."""
    markers = workdir / "markers"
    markers.mkdir(parents=True, exist_ok=True)
    log = workdir / "query.log"
    args = ["--bootstrap", bootstrap, "--checkpoints", str(workdir / "ckpt")]
    for input_topic, output, guarantee, prefix, _ in queries:
        args += ["--query", f"{input_topic},{output},{guarantee},{prefix}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]),
           "EOS_MARKERS": str(markers), "EOS_PAUSE_BATCH": str(batch),
           "EOS_PAUSE": ",".join(f"{q[1]}:{q[4]}" for q in queries)}
    job = _start(args, env, log)
    try:
        _wait_for_stops(job, [markers / f"paused-{q[1]}" for q in queries], kill_after_s, log)
    finally:
        kill_group(job)
    env["EOS_PAUSE"] = ""
    job = _start(args, env, log)
    try:
        assert wait_exited(job, RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
    finally:
        kill_group(job)


EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


def run_with_executor_kills(bootstrap: str, workdir: Path, queries: list[tuple[str, str, str, str]],
                            master: str = "local-cluster[2,1,1024]") -> list[int]:
    """The `queries` ((input, output, guarantee, prefix)) in one driver on `master`, one after the other; for
    each, the executor JVM running its first task whose rows are all written (eos_query.py's stop "written")
    is SIGKILLed there, and the driver runs on to the end. Returns the killed executors' pids; raises with the log's tail if the
    driver fails or a stop is never reached."""
    markers = workdir / "markers"
    markers.mkdir(parents=True, exist_ok=True)
    log = workdir / "query.log"
    args = ["--bootstrap", bootstrap, "--checkpoints", str(workdir / "ckpt"), "--master", master, "--one-at-a-time"]
    for input_topic, output, guarantee, prefix in queries:
        args += ["--query", f"{input_topic},{output},{guarantee},{prefix}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)]),
           "EOS_MARKERS": str(markers), "EOS_PAUSE": ",".join(f"{q[1]}:written" for q in queries)}
    job = _start(args, env, log)
    try:
        killed = [_kill_executor_at(markers / f"paused-{q[1]}", job, log) for q in queries]
        assert wait_exited(job, RUN_TIMEOUT_S) == 0, log.read_text()[-3000:]
        return killed
    finally:
        kill_group(job)


def _kill_executor_at(stop: Path, job: subprocess.Popen, log: Path) -> int:
    """Wait for the stop's file, SIGKILL the executor JVM whose Python worker wrote its pid there."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not stop.exists():
        assert not exited(job) and time.monotonic() < deadline, f"{stop.name} not reached: {log.read_text()[-3000:]}"
        time.sleep(0.05)
    executor = _ancestor_running(int(stop.read_text()), EXECUTOR_MAIN)
    os.kill(executor, signal.SIGKILL)
    return executor


def _ancestor_running(pid: int, main_class: str) -> int:
    """The nearest ancestor of `pid` (itself included) whose command line names `main_class`."""
    while pid > 1:
        proc = Path(f"/proc/{pid}")
        if main_class.encode() in (proc / "cmdline").read_bytes():
            return pid
        pid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])  # field 4: the parent's pid
    raise AssertionError(f"no ancestor process runs {main_class}")


def _wait_for_stops(job: subprocess.Popen, stops: list[Path], kill_after_s: float | None, log: Path) -> None:
    deadline = time.monotonic() + (RUN_TIMEOUT_S if kill_after_s is None else kill_after_s)
    while not all(stop.exists() for stop in stops) and not exited(job):
        if time.monotonic() >= deadline:
            assert kill_after_s is not None, f"the stops were not reached: {log.read_text()[-3000:]}"
            return
        time.sleep(0.05)
    assert not exited(job) or kill_after_s is not None, log.read_text()[-3000:]


def duplicates_and_losses(cluster, output_topic: str, expected: list[str]) -> tuple[dict, set]:
    """(value -> count for values read more than once, values never read) under read_committed."""
    found = Counter(read_values(cluster, output_topic, "read_committed", len(expected)))
    return {v: n for v, n in found.items() if n > 1}, set(expected) - set(found)
