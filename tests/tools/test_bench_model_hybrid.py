"""``bench model --model hybrid --device cpu``: the check the compatibility matrix runs per
release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_cpu_run_reports_the_hybrid_model_within_tolerance(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "model", "--model", "hybrid",
                           "--device", "cpu", "--out", str(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "hybrid_check.json").read_text())
    assert sorted(report["configs"]) == ["tied", "untied"]
    for row in report["configs"].values():
        assert row["class"] in ("HybridModel", "MambaModel")
        assert row["n_grads"] > 20
        for key in ("log_probs_max_abs", "entropy_max_abs", "grad_max_rel"):
            assert 0 <= row[key] <= 1e-5, (key, row[key])
