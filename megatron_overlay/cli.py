"""``megatron-overlay``: status | patch | unpatch | verify | demo."""

from __future__ import annotations

import argparse
import sys

from . import patching


def _print_status(st: patching.Status) -> None:
    if st.core_version is None:
        print(f"megatron-core: not found ({st.detail})")
        return
    line = f"megatron-core {st.core_version} in {st.site}: {st.state}"
    if st.patch_set:
        line += f" (patch set {st.patch_set})"
    print(line)
    if st.state == patching.NATIVE:
        print("  output_processor hook: built in; processor names: "
              + ("resolved (overlay name lookup applied)" if st.name_lookup else "not resolved"))
    elif st.state == patching.PATCHED:
        print("  output_processor hook: back-ported; processor names: resolved")
    elif st.state == patching.UNPATCHED:
        print("  output_processor hook: missing; run `megatron-overlay patch`")
    if st.detail:
        print(f"  {st.detail}")


def _cmd_status(args) -> int:
    st = patching.status(args.site)
    print(st.to_json()) if args.json else _print_status(st)
    return 0 if st.state != patching.UNSUPPORTED else 1


def _cmd_patch(args) -> int:
    _print_status(patching.apply(args.site))
    return 0


def _cmd_unpatch(args) -> int:
    _print_status(patching.revert(args.site))
    return 0


def _cmd_verify(args) -> int:
    ok, st, problems = patching.verify(args.site)
    _print_status(st)
    for f in st.files:
        print(f"  {f['matches']:>8}  {f['path']}")
    for problem in problems:
        print(f"  problem: {problem}")
    print("verify: OK" if ok else "verify: FAILED")
    return 0 if ok else 1


def _cmd_demo(args) -> int:
    from .demo import run_demo  # imports torch and megatron: only here

    return run_demo(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="megatron-overlay",
        description="The output_processor hook on every megatron-core 0.12-0.19, "
                    "and fused log-prob/entropy processors.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in [
        ("status", _cmd_status, "installed core: version, state, patch set"),
        ("patch", _cmd_patch, "apply the patch set for the installed core (idempotent)"),
        ("unpatch", _cmd_unpatch, "restore the byte-identical upstream core"),
        ("verify", _cmd_verify, "check the core is patched and its metadata tells the truth"),
    ]:
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--site", help="directory holding megatron/ and its dist-info "
                                        "(default: the core this Python imports)")
        cmd.set_defaults(func=func)
        if name == "status":
            cmd.add_argument("--json", action="store_true", help="machine-readable output")
    from . import demo  # its options only: torch is imported when the demo runs

    demo_cmd = sub.add_parser(
        "demo", help="fused_logprob vs materialized logits on a small GPTModel",
        description="Build megatron's GPTModel (2 layers, random weights; on the GPU when "
                    "there is one) and compare forward+backward through "
                    "output_processor='fused_logprob' with the materialized logits: "
                    "results, time and peak memory.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    demo.add_arguments(demo_cmd)
    demo_cmd.set_defaults(func=_cmd_demo)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except patching.PatchError as err:
        print(f"megatron-overlay: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
