"""notebooks/quickstart.ipynb runs end to end (nbclient, a kernel on this interpreter), so it never rots."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # "python3" is ipykernel's native kernel: this interpreter (sys.executable), so the .venv's packages.
    client = NotebookClient(nb, kernel_name="python3", timeout=600, resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", ())]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "sent 3000 events" in text and "stopped" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert os.path.exists(NOTEBOOK)
