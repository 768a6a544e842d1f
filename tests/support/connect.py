"""A Spark Connect server in a subprocess of its own, and a client session on it, for integration tests.

The server is pyspark's own (`org.apache.spark.sql.connect.service.SparkConnectServer`, in the wheel's
jars/spark-connect_2.13-4.3.0.jar), started as `sbin/start-connect-server.sh` starts it: `spark-submit
--class SparkConnectServer` with no application resource, in local mode, on a gRPC port the kernel picks
(`spark.connect.grpc.binding.port=0`), found in its log line "Spark Connect server started at: HOST:PORT".
Its Python workers run this interpreter (PYSPARK_PYTHON), so they import this checkout's sparklog and find
`pyspark_sparklog`, which registers `format("sparklog")` on the server.

Rule 1: every process started here is stopped by `stop()`: spark-submit runs in a session of its own, and
`stop()` signals its whole process group (the launcher's shell, the JVM and the Python workers it forked),
SIGTERM first, SIGKILL after STOP_TIMEOUT_S.
Rule 2: the client session is a Spark Connect one beside any classic session of the test process: it is made
with `builder.remote(url).create()` (getOrCreate refuses while a classic SparkContext is active), and pyspark's
marker for a Connect process (SPARK_CONNECT_MODE_ENABLED, which pyspark.sql.functions and the session builder
read) is set only while the client is in use, then restored.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from support.processes import exited, kill_group, signal_group, wait_exited
from support.spark import SPARK_CONF

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = re.compile(r"Spark Connect server started at: (\S+):(\d+)")
START_TIMEOUT_S = 300.0  # a JVM and a SparkContext at load 15 on 2 cores
STOP_TIMEOUT_S = 30.0
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


class ConnectServer:
    """`start()` returns the server's `sc://` URL once it listens; `stop()` ends every process of it."""

    def __init__(self, work: Path, master: str = "local[2]") -> None:
        self.work, self.master = work, master
        self.log = work / "connect-server.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> str:
        import pyspark

        spark_home = Path(pyspark.__file__).parent
        conf = {**SPARK_CONF, "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": "0"}
        command = [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master,
                   "--name", "sparklog-connect-tests"]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        env = {**os.environ, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable}
        self.work.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(command, cwd=self.work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        return self._wait_started()

    def _wait_started(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = STARTED.search(self.log.read_text(errors="replace"))
            if found:
                return f"sc://{found.group(1)}:{found.group(2)}"
            if exited(self.process):
                raise RuntimeError(f"the Spark Connect server exited ({wait_exited(self.process, 0)}): {self.tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"the Spark Connect server did not start in {START_TIMEOUT_S:.0f} s: {self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """SIGTERM to the server's process group, then SIGKILL to whatever of it is left (Rule 1)."""
        if self.process is None:
            return
        signal_group(self.process, signal.SIGTERM)
        try:
            wait_exited(self.process, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pass
        kill_group(self.process)  # Python workers still exiting, or a JVM that did not stop
        self.process = None


@contextmanager
def connect_session(url: str):
    """A Spark Connect client session on `url` (Rule 2), stopped when the block ends."""
    from pyspark.sql import SparkSession

    before = os.environ.get(CONNECT_MODE)
    os.environ[CONNECT_MODE] = "1"
    session = SparkSession.builder.remote(url).create()
    try:
        yield session
    finally:
        session.stop()
        if before is None:
            del os.environ[CONNECT_MODE]
        else:
            os.environ[CONNECT_MODE] = before
