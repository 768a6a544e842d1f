"""A plain (non-editable) `pip install` of the wheel gives a working `sparklog` command, demo and jobs.

The wheel is built from a copy of the package sources (as `pip install .` builds it) and installed with
`--no-deps` into a fresh venv; the dependencies come from the project's .venv through a .pth file, which
adds only that site-packages directory (the .pth files inside it, such as the editable install's path to
this checkout, are not processed). Everything runs from a directory outside the checkout, so nothing of the
checkout can stand in for what the wheel lacks. `scripts/wheel_demo.sh` runs the same with the Spark steps.

The wheel's compiled record codec is built with `CFLAGS=-O0 -g0` (appended after Python's own -O3 -g, so
they win): what is tested is what the wheel carries, and gcc at -O3 takes 7x as long (about 100 s of this
test on a loaded 2-core machine against 14 s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "sparklog", "pyspark_sparklog", "jobs")  # what packaging reads
PIP_TIMEOUT_S = 240  # the build fetches setuptools into its isolated build environment
DEMO_TIMEOUT_S = 180
QUICK_BUILD_CFLAGS = "-O0 -g0"  # the codec's C compiles 7x faster than at Python's -O3 -g


def _pip(*args: str, timeout: float = PIP_TIMEOUT_S, env: dict | None = None) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def install_wheel(tmp: Path) -> Path:
    """Build the wheel, install it into a fresh venv; returns that venv's bin directory."""
    source = tmp / "src"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                            if (REPO / name).is_dir() else {}))
    quick = dict(os.environ, CFLAGS=f"{os.environ.get('CFLAGS', '')} {QUICK_BUILD_CFLAGS}".strip())
    _pip("wheel", "--no-deps", "--wheel-dir", str(tmp / "dist"), str(source), env=quick)
    [wheel] = (tmp / "dist").glob("sparklog-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    _pip("--python", str(venv / "bin" / "python"), "install", "--no-deps", str(wheel))
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def test_the_installed_wheel_runs_the_demo_and_carries_the_jobs(tmp_path):
    bin_dir = install_wheel(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
    env.update(COLUMNS="160", PYSPARK_PYTHON=str(bin_dir / "python"))

    where = subprocess.run([str(bin_dir / "python"), "-c",
                            "import sparklog, jobs, jobs.load_warehouse, jobs.pageview_counts, jobs.audit, "
                            "jobs.mirror, pyspark_sparklog, sparklog.records as r; print(sparklog.__file__); "
                            "print(jobs.__file__); print(r.IMPLEMENTATION)"],
                           capture_output=True, text=True, cwd=outside, env=env, timeout=120)
    assert where.returncode == 0, where.stderr[-3000:]
    *files, implementation = where.stdout.split()
    assert all(line.startswith(str(tmp_path / "venv")) for line in files), where.stdout
    import sparklog.records

    assert implementation == sparklog.records.IMPLEMENTATION  # the quick (-O0) build's codec is the one that runs

    demo = subprocess.run([str(bin_dir / "sparklog"), "demo", "--events", "200", "--brokers", "1", "--partitions", "1",
                           "--no-spark", "--dir", str(outside / "work"), "--chart", str(outside / "chart.png")],
                          capture_output=True, text=True, cwd=outside, env=env, timeout=DEMO_TIMEOUT_S)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "produce: 2 producers" in demo.stdout and "consume: ZooKeeper group of 3" in demo.stdout
    assert "all checks passed" in demo.stdout


def test_the_command_does_not_hide_a_missing_module_of_its_own(monkeypatch):
    """A listed command module that is missing (as jobs/ was from the wheel) is a packaging bug to report, not
    a command to leave out silently."""
    from sparklog import cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", cli.COMMAND_MODULES + ("jobs.no_such_command",))
    with pytest.raises(ModuleNotFoundError, match="jobs.no_such_command"):
        cli.build_parser()
