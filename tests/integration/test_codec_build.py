"""Building sparklog from source without a C compiler: the install succeeds, the build log says the compiled
record codec and send path failed, and sparklog runs the pure-Python codec and says why (`sparklog.records`),
and the producer's pure-Python send path."""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 600  # pip fetches setuptools and Cython into an isolated build environment
with open(REPO / "pyproject.toml", "rb") as _file:
    KERNELS = [module["name"] for module in tomllib.load(_file)["tool"]["setuptools"]["ext-modules"]]


def tracked_copy(destination: Path) -> Path:
    """The checkout's tracked files, without the extension a developer's editable install built in place."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, destination / name)
    return destination


def pip(*args: str, env: dict) -> str:
    result = subprocess.run([sys.executable, "-m", "pip", *args], env=env, capture_output=True, text=True,
                            timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.mark.slow
def test_a_build_without_a_c_compiler_installs_the_pure_python_codec(tmp_path):
    source = tracked_copy(tmp_path / "source")
    env = dict(os.environ, CC=str(tmp_path / "no-such-cc"))
    env.pop("SPARKLOG_NO_EXTENSIONS", None)
    log = pip("wheel", "-v", "--no-deps", "-w", str(tmp_path / "wheel"), str(source), env=env)
    assert 'building extension "sparklog.records._cbatch" failed' in log
    assert 'building extension "sparklog.client._csend" failed' in log
    assert [name for name in KERNELS if f'building extension "{name}" failed' not in log] == []
    (wheel,) = (tmp_path / "wheel").glob("sparklog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "sparklog/records/batch.py" in names and not [name for name in names if name.endswith(".so")]
    pip("install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel), env=env)
    script = "import sparklog, sparklog.records as r; print(sparklog.__file__); print(r.IMPLEMENTATION); " \
             "print(r.COMPILED_UNAVAILABLE); from sparklog.client import sendpath as s, producer; " \
             "print(s.IMPLEMENTATION, s.SendPath.__name__); import sparklog.protocol.produce_run; " \
             "from sparklog.records import implementation as i; print(sorted(k.module for k in i.report() " \
             "if not k.compiled and k.unavailable.startswith('the compiled ')))"
    result = subprocess.run([sys.executable, "-c", script], env=dict(env, PYTHONPATH=str(tmp_path / "site")),
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    location, name, why, send_path, pure_kernels = result.stdout.splitlines()
    assert location.startswith(str(tmp_path / "site")) and name == "python"
    assert why.startswith("the compiled codec was not built")
    assert send_path == "python PySendPath"  # the producer's send() runs its pure-Python twin
    assert pure_kernels == repr(sorted(KERNELS))  # every kernel reported pure, each saying it was not built
