"""Pass 20: pass 18's A/B of the top-k's exact second maxima (docs/h200/pass18/exact_ab.py,
its modes and protocols unchanged) at cells no pass has timed: k = 12 and 24 at 256 and
1024 tokens (the tree: pack_second below k = 16, pack_third from it), and k = 16 at 4096
tokens (the tree: pack_second past 2048 rows).

    PYTHONPATH=. python docs/h200/pass20/exact_cells.py OUT_PREFIX     (one GPU)

writes OUT_PREFIX_small.json (256 and 1024 tokens) and OUT_PREFIX_4096.json.
"""
import importlib.util
import pathlib
import sys

spec = importlib.util.spec_from_file_location(
    "exact_ab", pathlib.Path(__file__).parents[1] / "pass18" / "exact_ab.py")
exact_ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(exact_ab)

if __name__ == "__main__":
    exact_ab.SHAPES = [(256, 4096, 151936), (1024, 4096, 151936)]
    exact_ab.KS = (12, 24)
    exact_ab.main(sys.argv[1] + "_small.json")
    exact_ab.SHAPES = [(4096, 4096, 151936)]
    exact_ab.KS = (16,)
    exact_ab.main(sys.argv[1] + "_4096.json")
