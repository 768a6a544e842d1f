import argparse
import re
import signal
import subprocess
import sys

from sparklog.cli.zookeeper import add_parser
from sparklog.coordination.connection import close, connect
from sparklog.coordination.zookeeper_server import four_letter_word


def test_parser_registers_zookeeper_start():
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["zookeeper", "start", "--port", "0", "--data-dir", "/tmp/x"])
    assert (args.port, args.data_dir) == (0, "/tmp/x")
    assert callable(args.func)


def test_start_runs_until_sigterm(request, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "zookeeper", "start", "--port", "0", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    request.addfinalizer(lambda: (process.kill(), process.wait()))
    line = process.stdout.readline()
    host, port = re.search(r"running at ([\d.]+):(\d+)", line).groups()
    client = connect(f"{host}:{port}")
    client.create("/cli", b"")
    close(client)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
    try:
        four_letter_word(host, int(port), "ruok", timeout=1)
        answered = True
    except OSError:
        answered = False
    assert not answered  # the JVM went with it


def test_missing_java_is_reported(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "zookeeper", "start", "--port", "0"],
        env={"PATH": "", "PYTHONPATH": ":".join(sys.path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "java was not found" in result.stderr
