"""``python -m tools.bench <subcommand>`` from the repository root (docs/BENCHMARKS.md)."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = ("op", "distill", "model", "tp", "cpu")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    subs = p.add_subparsers(dest="subcommand", required=True)
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"tools.bench.{name}")
        sub = subs.add_parser(name, description=module.__doc__, help=module.__doc__.split("\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("--out", default=f"out/bench_{name}")
        module.add_arguments(sub)
        sub.set_defaults(module=module, parser=sub)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser().parse_args(argv)
    return args.module.main(args, argv)


if __name__ == "__main__":
    sys.exit(main())
