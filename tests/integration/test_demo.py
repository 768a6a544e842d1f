"""`sparklog demo`, small, as a newcomer runs it: exit code, the summary, the chart; Ctrl-C leaves nothing behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _processes_under(path: Path) -> list[str]:
    """Command lines of live processes that mention `path` (brokers' log dirs, ZooKeeper's data dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def _demo(tmp_path: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "sparklog.cli", "demo", "--dir", str(tmp_path / "work"),
               "--chart", str(tmp_path / "chart.png"), *args]
    env = dict(os.environ, COLUMNS="160", PYSPARK_PYTHON=sys.executable)
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)


def _finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out.decode(errors="replace")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_demo_runs_small_end_to_end(tmp_path):
    proc = _demo(tmp_path, "--events", "3000")
    out = _finish(proc, 600)
    assert proc.returncode == 0, out[-5000:]
    for line in ("produce: 2 producers", "consume: ZooKeeper group of 3", "warehouse load", "aggregate: page views",
                 "audit: monitoring counts", "mirror: live -> offline", "0 discrepancies",
                 "3 replicas per partition", "killed with SIGKILL mid-produce", "back in every ISR",
                 "all checks passed"):
        assert line in out, (line, out[-5000:])
    assert "sparklog.activity: 3,000 rows" in out
    assert "0 missing, 0 extra" in out  # the mirror's exactly-once check (read_committed on the offline cluster)
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _processes_under(tmp_path / "work") == []


def test_ctrl_c_stops_everything(tmp_path):
    proc = _demo(tmp_path, "--events", "2000000", "--rate", "2000", "--no-spark")
    try:
        deadline = time.monotonic() + 120
        while not list((tmp_path / "work").glob("live/broker-*/logs/activity-*")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
            time.sleep(0.2)
        time.sleep(2)  # producing now
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out = _finish(proc, 60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted" in out
    assert _processes_under(tmp_path / "work") == []


def test_the_secure_demo_runs_its_clusters_over_sasl_ssl_only(tmp_path):
    """`--secure`, its cluster part (the whole demo takes over 4 minutes on a loaded machine): both clusters bind
    SASL_SSL alone (each broker's log) and register it alone (the demo checks ZooKeeper itself); the producers
    and the group log in as `demo` through the leader's SIGKILL, the followers replicate over it (acks=all)."""
    proc = _demo(tmp_path, "--secure", "--events", "3000", "--no-spark")
    out = _finish(proc, 600)
    assert proc.returncode == 0, out[-5000:]
    for line in ("security: every broker listener SASL_SSL (SCRAM-SHA-256 as User:demo", "endpoints not SASL_SSL: 0",
                 "ACL authorizer", "produce: 2 producers", "consume: ZooKeeper group of 3",
                 "killed with SIGKILL mid-produce", "back in every ISR", "all checks passed"):
        assert line in out, (line, out[-5000:])
    logs = [path.read_text() for path in (tmp_path / "work").glob("*/broker-*/broker-*.out")]
    assert len(logs) == 4 and all("listener SASL_SSL on" in log and "(PLAINTEXT)" not in log for log in logs)
    assert _processes_under(tmp_path / "work") == []
