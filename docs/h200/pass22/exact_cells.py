"""Pass 22: pass 18's A/B of the top-k's exact second maxima (docs/h200/pass18/exact_ab.py,
its modes and protocols unchanged) at cells no pass has timed: k = 10, 14, 20 and 28 at 256
tokens (the tree: pack_second below k = 16, pack_third from it, up to 2048 rows).

    PYTHONPATH=. python docs/h200/pass22/exact_cells.py OUT.json     (one GPU)
"""
import importlib.util
import pathlib
import sys

spec = importlib.util.spec_from_file_location(
    "exact_ab", pathlib.Path(__file__).parents[1] / "pass18" / "exact_ab.py")
exact_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exact_ab)

if __name__ == "__main__":
    exact_ab.SHAPES = [(256, 4096, 151936)]
    exact_ab.KS = (10, 14, 20, 28)
    exact_ab.main(sys.argv[1])
