"""Pass 19: pass 18's A/B of the top-k's exact second maxima (docs/h200/pass18/exact_ab.py,
its modes and protocols unchanged) at the cells that pass did not time: k = 16 at 256,
1024 and 2048 tokens, k = 32 at 2048 (and k = 32 at 256 and 1024 again, the same run's
reference to pass 18's figures).

    PYTHONPATH=. python docs/h200/pass19/exact_cells.py OUT.json        (one GPU)
"""
import importlib.util
import pathlib
import sys

spec = importlib.util.spec_from_file_location(
    "exact_ab", pathlib.Path(__file__).parents[1] / "pass18" / "exact_ab.py")
exact_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exact_ab)

exact_ab.SHAPES = [(256, 4096, 151936), (1024, 4096, 151936), (2048, 4096, 151936)]
exact_ab.KS = (16, 32)

if __name__ == "__main__":
    exact_ab.main(sys.argv[1])
