"""``megatron-overlay``: status | patch | unpatch | verify | wheel | demo.

Exit codes, for scripts: 0 the core is ready (patched, or native with the name lookup) or
the command did what was asked (``verify``: the core is wholly patched or wholly
upstream's, its metadata true); 1 it is not ready (status, patch) or not consistent
(verify); 2 refused or failed, nothing changed; 141 the output's reader went away
(``| head``: the work is done or not, as ``status`` says). Every error is one line on
stderr, ``megatron-overlay: error: ...``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

from . import __version__, patching
from .patching.errors import os_error_reason

EXIT_OK, EXIT_NOT_READY, EXIT_REFUSED = 0, 1, 2
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE  # 141, a shell's code for a process SIGPIPE ended


def _print_status(st: patching.Status) -> None:
    if st.core_version is None:
        print(f"megatron-core: not found ({st.detail})")
        return
    line = f"megatron-core {st.core_version} in {st.site}: {st.state}"
    if st.patch_set:
        applied = st.name_lookup or st.state not in (patching.UNPATCHED, patching.NATIVE)
        line += f" (patch set {st.patch_set}{'' if applied else ' available, not applied'}"
        if st.same_files_as:
            line += f": its files are byte-identical to {st.same_files_as}'s"
        line += ")"
    print(line)
    if st.state in (patching.NATIVE, patching.PATCHED):
        hooked = ", ".join(f"{cls} ({'built in' if how == 'native' else how})"
                           for cls, how in st.models.items())
        print(f"  output_processor hook on: {hooked}; processor names: "
              + ("resolved (overlay name lookup applied)" if st.name_lookup else
                 "not resolved; `megatron-overlay patch` adds the name lookup and the hybrid "
                 "model's hook"))
    elif st.state == patching.UNPATCHED:
        print("  output_processor hook: missing; run `megatron-overlay patch`")
    if st.detail:
        print(f"  {st.detail}")


def _missing_dependencies() -> list[str]:
    """megatron-overlay's declared run-time dependencies that are not installed (when it is
    installed as a distribution; a source checkout on the path declares none)."""
    import importlib.metadata
    import re

    try:
        requires = importlib.metadata.requires("megatron-overlay") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    missing = []
    for req in requires:
        if "extra ==" in req:
            continue
        name = re.match(r"[A-Za-z0-9._-]+", req).group(0)
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def _cmd_status(args) -> int:
    st = patching.status(args.site)
    missing = _missing_dependencies()
    if args.json:
        print(json.dumps({**st.to_dict(), "missing_dependencies": missing},
                         indent=2))
    else:
        _print_status(st)
        if missing:
            print(f"  megatron-overlay's own dependencies are not installed: "
                  f"{', '.join(missing)}; processors and the demo need them: pip install "
                  f"{' '.join(missing)}")
    return EXIT_OK if st.ready and not missing else EXIT_NOT_READY


def _report_change(args, verb: str, after: patching.Status) -> None:
    """What a writing command did: one line (or --json), then the state."""
    changed = after.changed
    if args.json:
        print(json.dumps({"changed": bool(changed), "changed_files": changed,
                          "status": after.to_dict()}, indent=2))
        return
    print(f"{verb}: {len(changed)} file(s) changed ({', '.join(changed)})" if changed else
          f"{verb}: nothing to do, nothing changed")
    _print_status(after)


def _cmd_patch(args) -> int:
    st = patching.patch(args.site)
    _report_change(args, "patch", st)
    return EXIT_OK if st.ready else EXIT_NOT_READY


def _cmd_unpatch(args) -> int:
    _report_change(args, "unpatch", patching.unpatch(args.site))
    return EXIT_OK


def _cmd_wheel(args) -> int:
    import tempfile

    from .patching import wheel

    with tempfile.TemporaryDirectory(prefix="megatron-overlay-wheel-") as tmp:
        source = args.source or wheel.download(args.release, Path(tmp), args.python_version,
                                               args.platform)
        path = wheel.build(args.release, Path(source), Path(args.out)).resolve()
    print(f"built {path.name} from {Path(source).name}; install it with your pin: pip "
          f"install --find-links {path.parent} megatron-core=={args.release} (over an "
          f"installed upstream {args.release}: add --force-reinstall --no-deps)",
          file=sys.stderr)
    if args.print_requirement:
        print(wheel.requirement_line(path))
    print(path)
    return EXIT_OK


def _cmd_verify(args) -> int:
    ok, st, problems = patching.verify(args.site)
    if args.json:
        print(json.dumps({"ok": ok, "problems": problems, "status": st.to_dict()},
                         indent=2))
        return EXIT_OK if ok else EXIT_NOT_READY
    _print_status(st)
    for f in st.files:
        print(f"  {f['matches']:>8}  {f['path']}")
    for problem in problems:
        print(f"  problem: {problem}")
    form = "patched" if st.ready else "upstream's own files"
    has_record = st.site is not None and any(
        Path(st.site).glob("megatron_core-*.dist-info/RECORD"))
    record = "hashes and RECORD agree" if has_record else "hashes agree; no RECORD to check"
    print(f"verify: OK ({form}; {record})" if ok else "verify: FAILED")
    return EXIT_OK if ok else EXIT_NOT_READY


def _cmd_demo(args) -> int:
    missing = _missing_dependencies()
    try:  # the demo builds megatron's own GPTModel; found, not imported (its import warns,
        # which the demo holds back from the progress display once it runs)
        found = importlib.util.find_spec("megatron.core") is not None
    except ImportError:
        found = False
    if found:  # e.g. Megatron-LM on PYTHONPATH: no distribution metadata, but importable
        missing = [name for name in missing if name != "megatron-core"]
    elif "megatron-core" not in missing:
        missing.append("megatron-core")
    if missing:  # one line, as every refusal, not an ImportError's traceback
        print(f"megatron-overlay: error: the demo needs {', '.join(missing)}, not installed "
              f"here: pip install {' '.join(missing)} (megatron-core: the release you "
              f"patch, or the overlay's wheel of it; `make demo` sets all of it up)",
              file=sys.stderr)
        return EXIT_REFUSED
    from .demo import run_demo  # imports torch and megatron: only here

    return run_demo(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="megatron-overlay",
        description="The output_processor hook on every megatron-core 0.12-0.19, "
                    "and fused log-prob/entropy processors.",
        epilog="exit codes: 0 ready / done / verified; 1 not ready (status, patch) or not "
               "consistent (verify); 2 refused or failed, nothing changed; 141 the output's "
               "reader went away")
    parser.add_argument("--version", action="version",
                        version=f"megatron-overlay {__version__} (patch sets for megatron-core "
                                f"{', '.join(patching.supported_releases())})")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, help_text in [
        ("status", _cmd_status, "installed core: version, state, patch set"),
        ("patch", _cmd_patch, "apply the patch set for the installed core (idempotent)"),
        ("unpatch", _cmd_unpatch, "restore the byte-identical upstream core"),
        ("verify", _cmd_verify, "check the core is wholly patched or wholly upstream's, and "
                                "that its metadata tells the truth"),
    ]:
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("--site", help="directory holding megatron/ and its dist-info "
                                        "(default: the core this Python imports)")
        cmd.set_defaults(func=func)
        cmd.add_argument("--json", action="store_true", help="machine-readable output")
    wheel = sub.add_parser(
        "wheel", help="build a patched megatron-core wheel (X+overlay.2) from upstream's",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Build megatron_core-RELEASE+overlay.2-<upstream tags>.whl. The last line "
                    "of stdout is its path. Install it with your existing pin: pip install "
                    "--find-links DIR megatron-core==RELEASE")
    wheel.add_argument("release", metavar="RELEASE", help="the upstream release, e.g. 0.13.1")
    wheel.add_argument("--from", dest="source", metavar="UPSTREAM.whl",
                       help="upstream's wheel (default: downloaded with pip for this Python)")
    wheel.add_argument("--out", default="wheelhouse", metavar="DIR",
                       help="where the wheel is written")
    wheel.add_argument("--print-requirement", action="store_true",
                       help="also print a hash-pinned requirements line")
    wheel.add_argument("--python-version", help="download for this Python (e.g. 3.12) "
                                                "instead of the running one")
    wheel.add_argument("--platform", help="download for this platform tag "
                                          "(e.g. manylinux_2_28_x86_64)")
    wheel.set_defaults(func=_cmd_wheel)
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
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)  # --version reads the patch sets
        return args.func(args)
    except patching.PatchError as err:
        message = str(err)
    except BrokenPipeError:
        # the reader went away (`| head`): not a refusal (EXIT_REFUSED says nothing
        # changed, and a patch may have finished); stop writing and exit as SIGPIPE would
        try:  # so that the interpreter's last flush does not raise it again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # a stdout without a descriptor (in-process callers)
            pass
        return EXIT_BROKEN_PIPE
    except OSError as err:  # one the patching code does not name: a path it cannot use
        message = os_error_reason(err)
    print(f"megatron-overlay: error: {message}", file=sys.stderr)
    return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
