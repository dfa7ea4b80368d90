#!/usr/bin/env python3
"""The compatibility matrix: every supported megatron-core release, by both install routes.

Under each release's family environment (tools/env.sh): upstream's wheel patched in place,
and the overlay's wheel installed, each `verify`-ed and run through
``python -m tools.bench model --model hybrid --device cpu``; on the wheel, the contract
tests. Writes docs/compatibility.json and docs/COMPATIBILITY.md (whose header says what
each column checks). Releases: every patch set, plus the yanked releases that patch sets
serve by content (0.18.1, 0.19.1).

    python tools/compat_matrix.py                  # every release (about 60 min on 2 cores)
    python tools/compat_matrix.py 0.13.0 0.17.1    # some (rows for others are kept)
    python tools/compat_matrix.py --keep-contract-tests   # all but the contract tests
                                                   # (their rows' results and commits kept)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from megatron_overlay import patching  # noqa: E402
from tools.make_patches import SAME_FILES_AS, fetch_wheel  # noqa: E402

OUT = REPO / "docs" / "COMPATIBILITY.md"
RESULTS = REPO / "docs" / "compatibility.json"
CONTRACT_TESTS = ["tests/core/test_hook_contract.py", "tests/core/test_hybrid_hook.py",
                  "tests/core/test_patching.py", "tests/core/test_install.py"]
HYBRID_TOL = 1e-5


def sh(*cmd, tree: Path | None = None, **kw) -> subprocess.CompletedProcess:
    """Run ``cmd`` from the repository, output captured; ``tree``: that core first on
    PYTHONPATH (then the repository), warnings off."""
    if tree is not None:
        kw["env"] = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(REPO)]),
                         PYTHONWARNINGS="ignore")
    return subprocess.run([str(c) for c in cmd], cwd=REPO, capture_output=True, text=True, **kw)


def release_key(release: str) -> tuple:
    return tuple(int(p) for p in release.split("."))


def family_env(release: str) -> str:
    """The test-matrix release whose venv (Python, torch, deps) runs this release."""
    minor = int(release.split(".")[1])
    return {12: "0.12.3", 13: "0.13.1", 14: "0.15.3", 15: "0.15.3", 16: "0.16.1"}.get(
        minor, "0.19.2")


def hybrid_check(python: Path, tree: Path, out: Path) -> dict:
    """``bench model --model hybrid --device cpu`` against the core in ``tree``: the worst
    difference of its configs, and whether all are within HYBRID_TOL."""
    proc = sh(python, "-m", "tools.bench", "model", "--model", "hybrid", "--device", "cpu",
              "--out", out, tree=tree)
    if proc.returncode != 0:
        return {"ok": False, "error": proc.stderr[-1500:]}
    configs = json.loads((out / "hybrid_check.json").read_text())["configs"]
    worst = max(max(c["log_probs_max_abs"], c["entropy_max_abs"], c["grad_max_rel"])
                for c in configs.values())
    return {"ok": worst <= HYBRID_TOL, "class": configs["tied"]["class"], "worst": worst,
            "configs": sorted(configs)}


def install(python: Path, wheel: Path, target: Path) -> None:
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)],
                   check=True)


def run_release(release: str, work: Path, cache: Path, previous: dict | None = None) -> dict:
    """One row. ``previous``: keep that row's contract-test results instead of running them."""
    venv = sh(REPO / "tools" / "env.sh", family_env(release), check=True).stdout
    python = REPO / venv.strip().splitlines()[-1] / "bin" / "python"
    row = {"release": release, "env": family_env(release),
           "commit": sh("git", "rev-parse", "--short", "HEAD").stdout.strip(),
           "python": sh(python, "-c", "import platform; print(platform.python_version())"
                        ).stdout.strip()}
    upstream = fetch_wheel(release, cache)
    site = work / release
    install(python, upstream, site)
    row["upstream_state"] = patching.status(site).state
    after = patching.patch(site)
    row.update(state=after.state, patch_set=after.patch_set, hook=after.hook,
               name_lookup=after.name_lookup, same_files_as=after.same_files_as)
    row["byte_compiled"] = sh(python, "-m", "compileall", "-q", site / "megatron").returncode == 0
    ok, _, problems = patching.verify(site)
    row["verify"] = "ok" if ok else "; ".join(problems)
    row["hybrid_in_place"] = hybrid_check(python, site, work / f"{release}-hybrid-in-place")
    shutil.rmtree(site, ignore_errors=True)

    # the wheel route: build, install into a fresh target, verify, run the contract tests
    built = sh(python, "-m", "megatron_overlay.cli", "wheel", release, "--from", upstream,
               "--out", work / "wheelhouse", env=dict(os.environ, PYTHONPATH=str(REPO)),
               check=True)
    wheel = Path(built.stdout.strip().splitlines()[-1])
    row["wheel"] = wheel.name
    target = work / f"{release}-wheel"
    install(python, wheel, target)
    ok, st, problems = patching.verify(target)
    row["wheel_verify"] = "ok" if ok else "; ".join(problems)
    row["wheel_state"] = st.state
    row["hybrid_wheel"] = hybrid_check(python, target, work / f"{release}-hybrid-wheel")
    if previous is not None:
        row.update(tests=previous["tests"], tests_ok=previous["tests_ok"],
                   tests_commit=previous.get("tests_commit", previous.get("commit")))
    else:
        row["tests_commit"] = row["commit"]
        # the tests take upstream's wheel from where tools/env.sh keeps them
        keep = REPO / ".venv" / "wheelhouse" / "upstream"
        keep.mkdir(parents=True, exist_ok=True)
        if not (keep / upstream.name).exists():
            shutil.copy(upstream, keep)
        tests = sh(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CONTRACT_TESTS,
                   tree=target)
        summary = [line for line in tests.stdout.splitlines()
                   if re.search(r"\d+ (passed|failed)", line)]
        row["tests"] = summary[-1].strip("= ") if summary else tests.stdout[-300:]
        row["tests_ok"] = tests.returncode == 0
        if not row["tests_ok"]:
            row["tests_tail"] = tests.stdout[-2000:]
    shutil.rmtree(target, ignore_errors=True)
    print(json.dumps(row), flush=True)
    return row


def _hybrid_cell(row: dict) -> str:
    cells = [row.get(f"hybrid_{route}") for route in ("in_place", "wheel")]
    if not all(cells):
        return "not run"
    verdicts = " / ".join("ok" if c["ok"] else "FAIL" for c in cells)
    worst = max(c.get("worst", float("inf")) for c in cells)
    return f"{cells[0].get('class', '?')}: {verdicts} ({worst:.1e})"


def _tests_commit(row: dict) -> str:
    commit = row.get("tests_commit", row.get("commit"))
    return f" (at {commit})" if commit != row.get("commit") else ""


def write_markdown(rows: list[dict]) -> None:
    tests = ", ".join(f"`{t}`" for t in CONTRACT_TESTS)
    header = (
        f"Generated by `python tools/compat_matrix.py` on {datetime.date.today().isoformat()}, "
        f"{platform.machine()} CPU, no GPU (gloo, TP 1 and 2). For each release, in place: "
        "upstream's wheel installed with `pip install --no-deps --target`, the overlay's patch "
        "set applied, the tree byte-compiled and `verify`-ed; wheel route: `megatron-overlay "
        "wheel` built from upstream's wheel, installed with `pip install --no-deps --target` "
        f"into a fresh directory and `verify`-ed, then the contract tests ({tests}) run against "
        "that installed core: signatures as 0.18 (GPTModel and the hybrid class), no-processor "
        "outputs and gradients bit-identical to upstream (both classes), a 0.18-style processor "
        "reproducing the default exactly, kwargs by name and order, patch/unpatch/refuse/kill "
        "at every write, wheels, pip/uv installs. States: `patched` = hook back-ported; "
        "`native` = GPTModel's hook built in, the overlay adds the name lookup (and the hybrid "
        "model's hook). Skips: the probe's missing-hook test on native releases (it needs a "
        "core without GPTModel's hook), the hybrid model's 0.18+ checks (inference mode, "
        "block-scope graphs, the MambaModel alias) before 0.18. Yanked 0.18.1 and 0.19.1 are "
        "served by 0.18.0's and 0.19.0's patch sets (their `gpt_model.py` is byte-identical). "
        "Hybrid model: on each route's tree, `python -m tools.bench model --model hybrid "
        "--device cpu` builds the release's hybrid class (MambaModel before 0.18, HybridModel "
        "from 0.18; attention and MLP layers, the final norm swapped for torch's, Mamba layers "
        "not exercised) and compares `output_processor=\"fused_logprob\"` by name with the "
        "logits path at TP 1, tied and untied: ok when log-probs, entropy and every gradient "
        f"agree within {HYBRID_TOL:g} (the worst difference shown). `commit`: where this row's "
        "checks ran; the contract tests' own commit is named beside them.")
    kept = sorted({row["tests_commit"] for row in rows
                   if row.get("tests_commit", row.get("commit")) != row.get("commit")})
    if kept:
        header += (
            " Contract-test results marked `(at C)` ran at commit C and were kept "
            f"(`--keep-contract-tests`); at {', '.join(kept)} the patch sets were `overlay.1`, "
            "GPTModel only, whose patched files are byte-identical to `overlay.2`'s (which adds "
            "the hybrid model's file: checked in the hybrid column and in every leg of the test "
            "matrix).")
    lines = [
        "# Compatibility matrix", "", header, "",
        "| release | Python | upstream state | in place: `patch` | patch set | "
        "byte-compiled | verify | wheel: installed | verify | hybrid model: in place / wheel "
        "| contract tests (on the wheel) | commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(rows, key=lambda r: release_key(r["release"])):
        lines.append(
            f"| {row['release']} | {row['python']} | {row['upstream_state']} | {row['state']} | "
            f"{row['patch_set']} | {'yes' if row['byte_compiled'] else 'NO'} | {row['verify']} "
            f"| {row.get('wheel_state', '-')} | {row.get('wheel_verify', '-')} "
            f"| {_hybrid_cell(row)} "
            f"| {'PASS' if row['tests_ok'] else 'FAIL'}: {row['tests']}"
            f"{_tests_commit(row)} | {row.get('commit', '?')} |")
    OUT.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="*")
    parser.add_argument("--cache", type=Path,
                        default=Path(tempfile.gettempdir()) / "megatron-core-wheels")
    parser.add_argument("--keep-contract-tests", action="store_true",
                        help="keep each row's contract-test results (and their commit) from "
                             "docs/compatibility.json instead of running them")
    parser.add_argument("--rewrite", action="store_true",
                        help="only rewrite the markdown from docs/compatibility.json")
    args = parser.parse_args()
    if args.rewrite:
        write_markdown(json.loads(RESULTS.read_text()))
        return
    releases = args.releases or sorted([*patching.supported_releases(), *SAME_FILES_AS],
                                       key=release_key)
    args.cache.mkdir(parents=True, exist_ok=True)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    rows = {r["release"]: r for r in previous}
    with tempfile.TemporaryDirectory() as work:
        for release in releases:
            keep = rows.get(release) if args.keep_contract_tests else None
            rows[release] = run_release(release, Path(work), args.cache, keep)
            RESULTS.write_text(json.dumps(list(rows.values()), indent=1) + "\n")
            write_markdown(list(rows.values()))
    failed = [r["release"] for r in rows.values() if not r["tests_ok"] or not all(
        r.get(f"hybrid_{route}", {}).get("ok") for route in ("in_place", "wheel"))]
    print(f"{len(rows)} releases, failed: {failed or 'none'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
