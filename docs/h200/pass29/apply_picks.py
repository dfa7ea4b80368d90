"""A pytest plugin (pass 29): the tail settings tail_sweep.py picked ($PICKS_JSON: its
output, the "best" map "module.SETTING" -> value), applied to the package's kernel
modules before any test runs, so that the GPU tests run as the picks would be defaults.

    PICKS_JSON=OUT.json PYTHONPATH=.:docs/h200/pass29 python -m pytest -p apply_picks ...
"""
import importlib
import json
import os


def pytest_configure(config):
    with open(os.environ["PICKS_JSON"]) as f:
        best = json.load(f).get("best", {})
    for name, value in best.items():
        module, setting = name.rsplit(".", 1)
        mod = importlib.import_module(f"megatron_overlay.ops.kernels.{module}")
        assert hasattr(mod, setting), name
        setattr(mod, setting, value)
    print("apply_picks:", best)
