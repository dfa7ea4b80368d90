"""The benchmark harness (python -m tools.bench) on CPU: its arithmetic, reports, argument
errors and every subcommand that runs without a GPU, at a tiny size (its timings need a
GPU: docs/BENCHMARKS.md)."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tools.bench import report, timing
from tools.bench.__main__ import main as bench

REPO = Path(__file__).resolve().parents[2]


def _timing(name, ms):
    return timing.Timing(name, calls=3, ms=list(ms), host_ms=[0.1] * len(ms))


def test_ratios_are_paired_within_each_round():
    # the floor drifts from round to round; the method tracks it at exactly 1.1x
    floor = [10.0, 12.0, 14.0]
    got = timing.paired_ratios({"gemm": _timing("gemm", floor),
                                "ours": _timing("ours", [1.1 * x for x in floor])}, "gemm")
    assert got["gemm"] == (1.0, 1.0, 1.0)
    median, low, high = got["ours"]
    assert median == pytest.approx(1.1) and low == pytest.approx(1.1) and high == pytest.approx(1.1)
    # a ratio of medians would agree here; with rounds out of step it would not
    skewed = timing.paired_ratios({"gemm": _timing("gemm", [10.0, 20.0, 30.0]),
                                   "ours": _timing("ours", [30.0, 22.0, 11.0])}, "gemm")
    assert skewed["ours"][0] == pytest.approx(1.1)
    assert skewed["ours"][1:] == (pytest.approx(11.0 / 30.0), pytest.approx(3.0))


def test_the_floor_runs_between_the_methods_and_each_round_pairs_with_its_median():
    # one round's bursts, in order: the floor's around each method; the methods' ratios
    # are over the median of the round's floor bursts (not any one of them)
    clock = iter(range(100))
    ran = []

    def timed(name):
        now = next(clock)
        ran.append(name)
        return {"gemm": 10.0, "a": 11.0, "b": 13.0}[name] + (now == 2) * 50.0  # an outlier

    out = {n: timing.Timing(n) for n in ("gemm", "a", "b")}
    for _ in range(2):
        timing.bracketed(["b", "a"], "gemm", timed, out)
    assert ran == ["gemm", "b", "gemm", "a", "gemm"] * 2
    assert out["gemm"].ms == [10.0, 10.0]  # the median: round 1's outlier burst drops out
    got = timing.paired_ratios(out, "gemm")
    assert got["gemm"] == (1.0, 1.0, 1.0)
    assert got["a"] == pytest.approx((1.1, 1.1, 1.1)) and got["b"] == pytest.approx((1.3,) * 3)
    # no reference: each name once, in order
    plain = {n: timing.Timing(n) for n in ("a", "b")}
    timing.bracketed(["a", "b"], None, timed, plain)
    assert [len(t.ms) for t in plain.values()] == [1, 1]


def test_bracketed_protocols_run_the_floor_around_every_method():
    ran = []
    fns = {m: (lambda x, m=m: ran.append(m)) for m in ("gemm", "a", "b")}
    got = timing.interleaved(fns, [(0,)], 2, burst_ms=0.001, heat_s=0, warmup_calls=0,
                             cuda=False, log=lambda s: None, bracket="gemm")
    calls = got["gemm"].calls  # calls per burst (each method's are sized alike here)
    bursts = [m for i, m in enumerate(ran[3:]) if i % calls == 0]  # after the sizing calls
    # the other methods' order rotates from round to round, the floor around each
    assert bursts == ["gemm", "a", "gemm", "b", "gemm", "gemm", "b", "gemm", "a", "gemm"]
    assert all(len(got[m].ms) == 2 for m in fns)
    ran.clear()
    got, ratios = timing.synchronized(fns, [(0,)], 2, "gemm", calls=2, cuda=False,
                                      bracket=True)
    # per round: a block is one untimed call and one timed; the floor's around each method
    assert ran == ["gemm"] * 2 + ["a"] * 2 + ["gemm"] * 2 + ["b"] * 2 + ["gemm"] * 2 \
        + ["gemm"] * 2 + ["b"] * 2 + ["gemm"] * 2 + ["a"] * 2 + ["gemm"] * 2
    assert set(ratios) == {"gemm", "a", "b"} and len(got["gemm"].ms) == 2


def test_each_timed_burst_starts_after_the_settle_call_outside_its_time():
    # settle (the benches: methods.read_pending_label_checks) runs before every timed
    # burst, the floor's included, and its time is in no burst's
    ran = []

    def settle():
        ran.append("settle")
        time.sleep(0.02)  # far above a burst of these calls

    fns = {m: (lambda x, m=m: ran.append(m)) for m in ("gemm", "a")}
    got = timing.interleaved(fns, [(0,)], 2, burst_ms=0.001, heat_s=0, warmup_calls=0,
                             cuda=False, log=lambda s: None, bracket="gemm", settle=settle)
    calls = got["gemm"].calls
    timed = ran[2:]  # after the sizing calls, which are not settled
    starts = [i for i, m in enumerate(timed) if m == "settle"]
    assert len(starts) == 2 * 3  # per round: the floor, a, the floor
    assert all(timed[i + 1] != "settle" and timed[i + 1:i + 1 + calls].count("settle") == 0
               for i in starts)
    assert all(ms < 20.0 for t in got.values() for ms in t.ms)  # settle's 20 ms not in them


def test_the_benches_read_every_overlay_package_s_pending_label_checks(monkeypatch):
    import types

    from tools.bench import methods
    read = []
    for package in ("megatron_overlay", "megatron_overlay_base"):
        fake = types.SimpleNamespace(check_labels=lambda p=package: read.append(p))
        monkeypatch.setitem(sys.modules, package + ".ops.label_check", fake)
    methods.read_pending_label_checks()
    assert read == ["megatron_overlay", "megatron_overlay_base"]
    monkeypatch.delitem(sys.modules, "megatron_overlay_base.ops.label_check")
    read.clear()
    methods.read_pending_label_checks()  # no --baseline: ours only
    assert read == ["megatron_overlay"]


def test_a_method_without_rounds_or_reference_gets_no_ratio():
    assert timing.paired_ratios({"ours": _timing("ours", [1.0])}, "gemm") == {}
    broken = timing.Timing("peer", error="ImportError: not installed")
    got = timing.paired_ratios({"gemm": _timing("gemm", [1.0]), "peer": broken}, "gemm")
    assert "peer" not in got
    assert timing.summarize(broken) == {"error": "ImportError: not installed"}


def test_summary_fields():
    rec = timing.summarize(_timing("ours", [3.0, 1.0, 2.0]))
    assert rec["ms"] == 2.0 and rec["ms_rounds"] == [3.0, 1.0, 2.0] and rec["calls"] == 3
    assert rec["host_ms"] == pytest.approx(0.1) and rec["sm_mhz"] is None


def test_table_shows_ratio_ranges_and_leaves_missing_cells_empty():
    rows = [{"N": 8, "H": 4, "V": 16, "method": "gemm", "outputs": "floor", "fwd_ms": 1.0,
             "fwd_x": 1.0, "fwd_x_min": 1.0, "fwd_x_max": 1.0},
            {"N": 8, "H": 4, "V": 16, "method": "ours", "outputs": "lp", "fwd_ms": 1.05,
             "fwd_x": 1.05, "fwd_x_min": 1.01, "fwd_x_max": 1.09, "lp_err": 4.5e-5}]
    lines = report.table(rows).splitlines()
    assert len(lines) == 4 and all(line.count("|") == 19 for line in lines)
    ours = lines[3].split("|")
    assert ours[6].strip() == "1.050 (1.010-1.090)"
    assert ours[7].strip() == ""  # no fb timing: an empty cell, not a made-up number
    assert ours[10].strip() == "4.5e-05"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_timing_without_a_gpu_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench(["op", "--shapes", "8,4,16", "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_unknown_method_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench(["op", "--methods", "gemm,nope", "--out", str(tmp_path)])
    assert "nope" in capsys.readouterr().err


def _ids_ever_above(logits_kind, eps=2.0 ** -12):
    from tools.bench.inputs import TEMPERATURE, make_inputs
    sets, w = make_inputs(256, 128, 32768, seed=0, device="cpu", dtype=torch.float32,
                          logits=logits_kind)
    p = torch.softmax(sets[0][0] @ w.T / TEMPERATURE, dim=-1)
    return (p > eps).any(dim=0).float().mean().item()


def test_zipf_logits_concentrate_the_probability_on_few_ids():
    # what lets a kernel skip negligible vocab blocks: with "zipf" the ids that ever carry
    # more than 2^-12 (bf16 eps / 32) are a small set shared by all rows; with "iid" each
    # row has its own, and together they cover much of the vocabulary
    assert _ids_ever_above("zipf") < 0.1
    assert _ids_ever_above("iid") > 0.5


def test_fp32_gradient_reference_matches_the_closed_form():
    # the reference of the GPU gradient checks: d/dz of a * logp[y] + b * entropy is
    # a * (onehot(y) - p) - b * p * (logp + entropy), then through z = h @ w.T / T
    from tools.bench.inputs import TEMPERATURE, fp32_grads, loss_coeffs, make_inputs
    sets, w = make_inputs(6, 8, 40, seed=0, device="cpu")
    h, y = sets[0]
    a, b = loss_coeffs(6, "cpu")
    d_hidden, d_weight = fp32_grads(h, w, y, a, b)
    h64, w64 = h.double(), w.double()
    logp = torch.log_softmax(h64 @ w64.T / TEMPERATURE, -1)
    p, ent = logp.exp(), -(logp.exp() * logp).sum(-1)
    onehot = torch.nn.functional.one_hot(y, 40).double()
    g = (a.double()[:, None] * (onehot - p)
         - b.double()[:, None] * p * (logp + ent[:, None])) / TEMPERATURE
    assert d_hidden.dtype == d_weight.dtype == torch.float32
    torch.testing.assert_close(d_hidden.double(), g @ w64, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(d_weight.double(), g.T @ h64, rtol=1e-4, atol=1e-6)


def test_unknown_logit_distribution_is_refused():
    from tools.bench.inputs import make_inputs
    with pytest.raises(ValueError, match="logits must be one of"):
        make_inputs(4, 8, 16, seed=0, device="cpu", logits="gauss")


def test_cpu_smoke_run_of_the_method_table(tmp_path):
    # the tool's whole table path (inputs, methods, interleaved bursts, paired ratios,
    # accuracy against fp64, report) on tiny shapes; peers are absent here and are skipped
    out = tmp_path / "smoke"
    assert bench([
        "op", "--device", "cpu", "--shapes", "64,32,512", "--methods", "gemm,materialized,ours,cce",
        "--rounds", "2", "--burst-ms", "2", "--heat-s", "0", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["device"].startswith("cpu") and "--device" in data["meta"]["argv"]
    rows = {r["method"]: r for r in data["rows"]}
    assert set(rows) == {"gemm", "materialized", "ours"}  # cce is not installed here
    for name in ("materialized", "ours"):
        r = rows[name]
        assert len(r["fwd_ms_rounds"]) == 2 and len(r["fb_ms_rounds"]) == 2
        assert r["fwd_x_min"] <= r["fwd_x"] <= r["fwd_x_max"]
        assert r["fwd_peak_gib"] is None  # no allocator counters on CPU
    assert rows["ours"]["lp_err"] < 1e-4 and rows["ours"]["ent_err"] < 1e-4
    # the materialized reference rounds its logits to bf16 before the fp32 softmax
    assert 1e-4 < rows["materialized"]["lp_err"] < 0.1
    assert "| 64, 32, 512 | ours |" in (out / "table.md").read_text()


def test_cpu_smoke_run_with_single_synchronized_calls(tmp_path):
    # --sync: the same methods also timed one call at a time, ratios paired per round
    out = tmp_path / "sync"
    assert bench(["op", "--device", "cpu", "--shapes", "64,32,512", "--methods", "gemm,ours",
                  "--rounds", "2", "--burst-ms", "2", "--heat-s", "0", "--sync",
                  "--out", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    for phase in ("fwd", "fb"):
        x, lo, hi = rows["ours"][f"{phase}_sync_x"]
        assert 0 < lo <= x <= hi and rows["ours"][f"{phase}_sync_ms"] > 0
        assert rows["gemm"][f"{phase}_sync_x"] == [1.0, 1.0, 1.0]
    assert "sync calls" in (out / "table.md").read_text()


def test_synchronized_protocol_orders():
    # blocks: a round's figure is the median of its block of single calls (after one
    # untimed call); interleaved: every call a round (the protocol before pass 7)
    from tools.bench import timing
    ran = []
    fns = {"a": lambda x: ran.append(("a", x)), "b": lambda x: ran.append(("b", x))}
    got, ratios = timing.synchronized(fns, [(0,), (1,)], 2, "a", calls=6, cuda=False)
    assert [len(got[m].ms) for m in fns] == [2, 2] and got["a"].calls == 3
    assert [m for m, _ in ran] == ["a"] * 4 + ["b"] * 4 + ["b"] * 4 + ["a"] * 4
    assert ratios["a"] == (1.0, 1.0, 1.0) and ratios["b"][1] <= ratios["b"][0] <= ratios["b"][2]
    ran.clear()
    got, _ = timing.synchronized(fns, [(0,), (1,)], 2, "a", calls=3, cuda=False,
                                 order="interleaved")
    assert [len(got[m].ms) for m in fns] == [3, 3]
    with pytest.raises(ValueError, match="order"):
        timing.synchronized(fns, [(0,)], 2, "a", order="random", cuda=False)


def test_a_method_that_fails_is_recorded_in_both_protocols_and_the_run_goes_on(
        tmp_path, monkeypatch):
    """A method that raises at a shape (a peer out of memory): its row says why; the other
    methods are timed in bursts and as single calls (--sync handed it on and crashed)."""
    from tools.bench import methods, op

    class Failing(methods.Method):
        name, outputs = "failing", "nothing"

        def fwd(self, *inputs):
            raise RuntimeError("CUDA out of memory (as a peer at a large shape)")

        fb = fwd

    monkeypatch.setitem(op.METHODS, "failing", Failing)
    out = tmp_path / "failing"
    assert bench(["op", "--device", "cpu", "--shapes", "64,32,512", "--methods",
                  "gemm,ours,failing", "--rounds", "2", "--burst-ms", "2", "--heat-s", "0",
                  "--sync", "--phases", "both", "--out", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    for phase in ("fwd", "fb"):
        assert "out of memory" in rows["failing"][f"{phase}_error"]
        assert f"{phase}_sync_x" not in rows["failing"]
        assert rows["ours"][f"{phase}_sync_x"][0] > 0 and rows["ours"][f"{phase}_x"] > 0


def test_forward_only_methods_alone_time_the_forward_only(tmp_path):
    # the fp32 / tf32 heads are forward-only: the fb phase has nothing to time (it divided
    # by zero picking a round's order)
    out = tmp_path / "heads"
    assert bench(["op", "--device", "cpu", "--shapes", "64,32,512", "--methods",
                  "fp32_head,tf32_head", "--rounds", "2", "--burst-ms", "2", "--heat-s", "0",
                  "--no-grad-check", "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert all(r["fwd_ms"] > 0 and "fb_ms" not in r for r in rows)


def test_timing_records_each_failure_and_times_the_rest():
    from tools.bench import timing

    def fail(x):
        raise RuntimeError("no")

    got = timing.interleaved({"a": fail}, [(0,)], 3, heat_s=0, burst_ms=1, cuda=False,
                             log=lambda s: None)
    assert got["a"].error == "RuntimeError: no" and got["a"].ms == []
    calls = []
    fails_later = lambda x: calls.append(x) or (len(calls) > 2 and fail(x))  # noqa: E731
    got, ratios = timing.synchronized({"ok": lambda x: None, "late": fails_later}, [(0,)],
                                      2, "ok", calls=4, cuda=False, log=lambda s: None)
    assert got["late"].error == "RuntimeError: no" and got["late"].ms == []
    assert len(got["ok"].ms) == 2 and "late" not in ratios
    assert timing.synchronized({}, [(0,)], 2, "ok", cuda=False) == ({}, {})


def test_cpu_smoke_run_against_a_baseline_copy_of_the_package(tmp_path):
    # op --baseline: base, ours, ours_var (forward only), an fb variant (fb only)
    shutil.copytree(REPO / "megatron_overlay", tmp_path / "base" / "megatron_overlay_base")
    out = tmp_path / "vs_base"
    assert bench([
        "op", "--device", "cpu", "--baseline", str(tmp_path / "base"), "--shapes", "64,32,512",
        "--fb-variant", "blk:BACKWARD_BLOCK_TOKENS=16", "--rounds", "2", "--burst-ms", "2",
        "--heat-s", "0", "--out", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert list(rows) == ["gemm", "base", "ours", "ours_var", "fb_blk"]
    assert "fb_ms" not in rows["ours_var"] and "fwd_ms" not in rows["fb_blk"]
    for m in ("base", "ours", "ours_var"):
        assert rows[m]["invariant_rows"] == 64 and rows[m]["lp_err"] < 1e-4
        x, lo, hi = rows[m]["fwd_vs_base"]
        assert lo <= x <= hi
    assert rows["base"]["fb_vs_base"] == [1.0, 1.0, 1.0] and len(rows["fb_blk"]["fb_vs_base"]) == 3


def test_cpu_smoke_run_of_the_distillation_benchmark(tmp_path):
    out = tmp_path / "distill"
    assert bench(["distill", "--device", "cpu", "--shapes", "64,32,512", "--ks", "1,4",
                               "--rounds", "2", "--burst-ms", "2", "--heat-s", "0", "--sync",
                               "--sync-calls", "5", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    floors = {r["method"]: r for r in data["results"] if "method" in r}
    assert set(floors) == {"gemm", "gemm_fb"} and len(floors["gemm"]["ms_rounds"]) == 2
    assert floors["gemm"]["sync_calls"] == floors["gemm_fb"]["sync_calls"] == 6  # 2 x 3
    assert data["sync_order"] == "blocks"
    rows = {r["k"]: r for r in data["results"] if "k" in r}
    assert set(rows) == {1, 4}
    for k, row in rows.items():
        assert row["ids_equal_frac"] == 1.0 and row["topk_max_err"] < 1e-4
        # the log-prob op takes no k: timed once, in the first k's row
        k_free = ("logprob_ours", "logprob_ours_fb")
        assert all((name in row) == (k == 1) for name in k_free)
        for name in ("topk_ours", "topk_torch", "at_ours", "at_ours_fb", "at_torch_fb",
                     *(k_free if k == 1 else ())):
            rec = row[name]
            assert rec["x_floor_min"] <= rec["x_floor"] <= rec["x_floor_max"]
            assert rec["peak_extra_mib"] is None
            # --sync: the single synchronized calls' ratio beside the bursts'
            x, lo, hi = rec["sync_x"]
            assert lo <= x <= hi and rec["sync_ms"] > 0
            # and a synchronized call's host time (the GPU idle), beside a burst's
            assert rec["sync_host_ms"] > 0 and rec["host_ms"] > 0
    assert floors["gemm"]["sync_host_ms"] > 0
    # table.md: a row per op (and k), a column per shape, both protocols in each cell
    table = (out / "table.md").read_text()
    assert "distill --device cpu" in table and "single synchronized calls" in table
    cell = f"{rows[4]['topk_ours']['x_floor']:.3f} / {rows[4]['topk_ours']['sync_x'][0]:.3f}"
    assert f"| top-k k = 4 fwd | {cell} |" in table
    # the host table: a burst's / a synchronized call's host ms / extra memory ("-" on CPU)
    assert "a burst's first calls, the GPU busy / a synchronized call's, the GPU idle" in table
    rec = rows[4]["topk_ours"]
    assert f"| top-k k = 4 fwd | {rec['host_ms']:.2f} / {rec['sync_host_ms']:.2f} / - |" in table
    gemm = floors["gemm"]
    assert f"| the floor, fwd | {gemm['host_ms']:.2f} / {gemm['sync_host_ms']:.2f} / - |" in table
    assert "| log-prob fwd+bwd |" in table and "| log-prob fwd+bwd | error" not in table


def test_distillation_table_of_a_stored_gpu_run(tmp_path, capsys, monkeypatch):
    # the README's one-run table (pass 32, r2, one H100, the harness's final schedule, all
    # four shapes, each synchronized call's host time kept) from its results.json, as the
    # README prints it; a read-only command: nothing written, no out folder made
    monkeypatch.chdir(tmp_path)
    stored = REPO / "docs/h200/pass32/h100/r2/distill/results.json"
    assert bench(["distill", "--table", str(stored)]) == 0
    assert not any(tmp_path.iterdir())
    table = capsys.readouterr().out
    assert table.startswith("NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, 2026-12-08 01:18 UTC")
    readme = (REPO / "README.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) == 15 + 15 + 15 and all(line in readme for line in rows)
    lines = table.splitlines()

    def cells(line):  # a row's cells, its name first
        return [cell.strip() for cell in line.strip("|").split("|")]

    head = next(line for line in lines if line.startswith("| N, H, V:"))
    assert head.count("|") == 6  # four shapes
    run = json.loads(stored.read_text())
    row = next(r for r in run["results"] if r.get("k") == 32 and r["shape"][0] == 16384)
    rec = row["topk_ours"]
    cell = f"{rec['x_floor']:.3f} / {rec['sync_x'][0]:.3f}"
    got = next(line for line in lines if line.startswith("| top-k k = 32 fwd |"))
    assert cells(got)[3] == cell  # the third shape's column
    # host ms (a burst's, a synchronized call's) / extra MiB beyond the outputs, in the
    # second table
    second = [line for line in lines if line.startswith("| top-k k = 32 fwd |")][1]
    assert cells(second)[3] == (f"{rec['host_ms']:.2f} / {rec['sync_host_ms']:.2f} / "
                                f"{rec['extra_beyond_outputs_mib']:.1f}")
    # the floor's own host time under the ops', the host's speed beside theirs
    gemm = next(r for r in run["results"] if r.get("method") == "gemm"
                and r["shape"][0] == 16384)
    floor_host = [line for line in lines if line.startswith("| the floor, fwd |")][0]
    assert cells(floor_host)[3] == f"{gemm['host_ms']:.2f} / {gemm['sync_host_ms']:.2f} / -"


@pytest.mark.parametrize("run, schedule", [
    ("pass19/h100/r2", "each burst (block) over the floor's one of the same round"),
    ("pass20/h100/r2", "each burst (block) over the mean of the floor's just before and after"),
    ("pass21/h100/r6", "the floor's burst (block) before every method's and after the last, "
                       "each ratio over the median of its round's"),
])
def test_distillation_table_names_the_schedule_its_run_used(run, schedule):
    # three floor schedules among the stored runs: each table says which one its ratios
    # were taken under (the README's table moved from pass 20's to pass 21's run)
    from tools.bench.distill import table
    stored = REPO / "docs/h200" / run / "distill/results.json"
    assert schedule in table(json.loads(stored.read_text()))


def test_distillation_table_leaves_sweep_rows_out(capsys):
    # a --sweep run's config rows are kernel configs' times, not a shape of the op table
    from tools.bench.distill import table
    run = json.loads((REPO / "docs/h200/pass8/r4/distill/results.json").read_text())
    plain = table(run)
    run["results"].append({"shape": [8192, 4096, 151936], "k": 32, "config": "x", "ms": 1.0})
    run["results"].append({"shape": [7, 7, 7], "k": 32, "config": "y", "ms": 1.0})
    assert table(run) == plain


def test_distillation_table_refuses_what_is_not_a_distill_run(tmp_path, capsys):
    other = tmp_path / "results.json"
    other.write_text(json.dumps({"meta": {}, "rows": []}))
    with pytest.raises(SystemExit):
        bench(["distill", "--table", str(other)])
    assert "not a distill results.json" in capsys.readouterr().err


@pytest.mark.parametrize("phases", [["--phases", "fwd"], []])
def test_distillation_benchmark_forward_only_with_the_invariance_variant(tmp_path, phases):
    # forward-only methods, by --phases fwd or by the methods chosen: no 3-GEMM floor timed
    out = tmp_path / "ab"
    assert bench(["distill", "--device", "cpu", "--shapes", "64,32,512", "--ks", "4",
                  "--rounds", "2", "--burst-ms", "2", "--heat-s", "0", *phases,
                  "--methods", "topk_ours", "--invariance-ab", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert {r["method"] for r in data["results"] if "method" in r} == {"gemm"}
    row = next(r for r in data["results"] if r.get("k") == 4)
    assert {"topk_ours", "topk_ours_variant"} <= set(row) and "at_ours_fb" not in row
    assert row["topk_ours_variant"]["x_floor"] > 0
    assert "top-k k = 4 fwd, not invariant" in (out / "table.md").read_text()
    assert "the floor, fwd:" in (out / "table.md").read_text()
    assert "the floor, fwd+bwd" not in (out / "table.md").read_text()


def test_distillation_benchmark_against_a_baseline_copy_of_the_package(tmp_path):
    # distill --baseline: base's counterparts of the selected methods, ours' vs_base
    shutil.copytree(REPO / "megatron_overlay", tmp_path / "base" / "megatron_overlay_base")
    out = tmp_path / "vs_base"
    assert bench(["distill", "--device", "cpu", "--baseline", str(tmp_path / "base"),
                  "--shapes", "64,32,512", "--ks", "4", "--rounds", "2", "--burst-ms", "2",
                  "--heat-s", "0", "--methods", "topk_ours,at_ours_fb,logprob_ours_fb",
                  "--out", str(out)]) == 0
    row = next(r for r in json.loads((out / "results.json").read_text())["results"]
               if r.get("k") == 4)
    assert {"topk_ours", "topk_base", "at_ours_fb", "at_base_fb", "logprob_ours_fb",
            "logprob_base_fb"} <= set(row)
    assert "at_base" not in row and "topk_torch" not in row and "logprob_base" not in row
    for name in ("topk_ours", "at_ours_fb", "logprob_ours_fb"):
        x, lo, hi = row[name]["vs_base"]
        assert 0 < lo <= x <= hi
    assert "vs_base" not in row["topk_base"]


def test_distillation_benchmark_refuses_a_cpu_sweep(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench(["distill", "--device", "cpu", "--sweep", "64,32,512,4", "--out", str(tmp_path)])
    assert "CUDA only" in capsys.readouterr().err


def test_cpu_smoke_run_of_the_model_step(tmp_path):
    # in a fresh process: the model builder's CPU shims patch torch.cuda for good
    out = tmp_path / "model"
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "model", "--device", "cpu",
                           "--rounds", "2", "--out", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "results.json").read_text())
    for key in ("logits_forward_ms", "fused_forward_ms", "logits_step_ms", "fused_step_ms"):
        assert data[key] > 0 and len(data[f"{key[:-3]}_ms_rounds"]) == 2
    assert data["max_logprob_diff"] < 1e-5 and data["max_entropy_diff"] < 1e-5
    assert "| fused |" in (out / "table.md").read_text()


def test_cpu_subcommand_measures_each_pass_in_a_fresh_process(tmp_path):
    out = tmp_path / "cpu"
    assert bench(["cpu", "--shapes", "32,256", "--rounds", "1", "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [(r["method"], r["backward"]) for r in rows] == [
        ("fused", False), ("materialized", False), ("fused", True), ("materialized", True)]
    assert all(r["ms"] > 0 and r["peak_mib"] >= 0 for r in rows)
    assert "| 32 | 256 | fwd+bwd |" in (out / "table.md").read_text()


def test_markdown_table_has_one_cell_per_column():
    lines = report.markdown(("a", "b"), [(1, "x"), (2, "")]).splitlines()
    assert lines == ["| a | b |", "|---|---|", "| 1 | x |", "| 2 |  |"]


@pytest.mark.parametrize("argv, message", [
    (["nope"], "invalid choice"),
    (["op", "--logits", "gauss"], "invalid choice"),
    (["op", "--device", "cpu", "--phases", "fwd, bwd"], "--phases: ['bwd'] not among fwd, fb"),
    (["op", "--temperature", "1.0", "--sweep", "64,32,512"],
     "--temperature: --sweep, --host-profile and --breakdown run at T = 0.7"),
    (["distill", "--device", "cpu", "--methods", "topk_our,at_ours"],
     "--methods: unknown ['topk_our']"),
    (["distill", "--device", "cpu", "--methods", "topk_base"], "come with --baseline"),
    (["distill", "--device", "cpu", "--phases", "bwd"], "--phases: ['bwd'] not among"),
    (["tp", "--worlds", "1,2"], "needs 2 GPUs"),
])
def test_argument_errors_are_usage_errors(argv, message, capsys):
    if torch.cuda.device_count() >= 2 and argv[0] == "tp":
        pytest.skip("checks the refusal on a machine with fewer than 2 GPUs")
    with pytest.raises(SystemExit) as exc:
        bench(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_every_subcommand_has_help(capsys):
    from tools.bench.__main__ import SUBCOMMANDS
    for name in SUBCOMMANDS:
        with pytest.raises(SystemExit) as exc:
            bench([name, "--help"])
        assert exc.value.code == 0
        assert "--out" in capsys.readouterr().out


def test_cpu_smoke_run_of_the_head_precision_comparison(tmp_path):
    # op with the heads of issue 18's table: bf16 ("materialized"), TF32, fp32, ours, on
    # peaked logits with labels sampled from the softmax at T = 1
    out = tmp_path / "heads"
    assert bench([
        "op", "--device", "cpu", "--shapes", "64,32,512", "--rounds", "2", "--burst-ms", "2",
        "--heat-s", "0", "--methods", "gemm,materialized,tf32_head,fp32_head,ours",
        "--logits", "peaked", "--labels", "sampled", "--temperature", "1", "--phases", "fwd", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["temperature"] == 1.0 and data["meta"]["labels"] == "sampled"
    rows = {r["method"]: r for r in data["rows"]}
    assert not any("fb_ms" in r for r in rows.values()) and rows["fp32_head"]["mult_err"] < 1e-6
    assert rows["ours"]["mult_err"] < 5e-5 < rows["materialized"]["mult_err"]
    assert rows["ours"]["lp_mean_err"] < rows["materialized"]["lp_mean_err"] / 10


def test_cpu_smoke_run_of_the_precision_modes(tmp_path):
    # op with issue 18's modes: rounded logits (checked against fp64 like ours) and the two
    # mixed-operand methods (timed only: their fp32 inputs are not the reference's)
    out = tmp_path / "modes"
    assert bench([
        "op", "--device", "cpu", "--shapes", "64,32,512", "--rounds", "2", "--burst-ms", "2",
        "--heat-s", "0", "--methods",
        "gemm,ours,ours_bf16_logits,ours_fp32_hidden,ours_fp32_weight",
        "--out", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads((out / "results.json").read_text())["rows"]}
    assert all("fwd_ms" in r and "fb_ms" in r for r in rows.values()), rows
    assert rows["ours_bf16_logits"]["lp_mean_err"] > 10 * rows["ours"]["lp_mean_err"]
    assert "lp_err" not in rows["ours_fp32_hidden"] and "lp_err" not in rows["ours_fp32_weight"]


def test_sampled_labels_follow_the_softmax():
    from tools.bench.inputs import fp64_reference, make_inputs
    got = {}
    for labels in ("uniform", "sampled"):
        sets, w = make_inputs(256, 32, 512, seed=0, device="cpu", logits="peaked",
                              labels=labels, temperature=1.0)
        got[labels] = fp64_reference(sets[0][0], w, sets[0][1], 256, 1.0)[0].mean().item()
    # uniform labels sit at ~log(1/V) and below on peaked logits; sampled ones near the top
    assert got["sampled"] > got["uniform"] + 3


def test_the_readmes_gpu_commands_name_what_exists():
    # CI has no GPU to run them; it can check that each names a device.sh mode and that
    # each harness command line parses as written
    import re
    from tools.bench.__main__ import parser
    text = (REPO / "README.md").read_text() + (REPO / "docs" / "BENCHMARKS.md").read_text()
    script = (REPO / "tools" / "device.sh").read_text()
    modes = set(re.findall(r"device\.sh (\w[\w-]*)", text)) - {"MODE"}
    assert modes and all(re.search(rf"^{re.escape(m)}\)", script, re.M) for m in modes), modes
    commands = re.findall(r"`python -m tools\.bench ([^`]+)`", (REPO / "README.md").read_text())
    commands += re.findall(r"# python -m tools\.bench (.+?) \.\.\.$", (REPO / "README.md").read_text(),
                           re.M)
    commands = [c for c in commands if "<" not in c]  # placeholders: <subcommand>
    assert len(commands) >= 5
    for line in commands:
        parser().parse_args(line.split())


def test_the_readmes_one_run_tables_are_what_their_command_prints(capsys):
    # README's tables of the distillation ops are a stored run's table.md: the
    # `distill --table RESULTS` it names prints every row of them, as written there
    import re
    readme = (REPO / "README.md").read_text()
    named = re.findall(r"`python -m tools\.bench distill --table (\S+)`", readme)
    assert named
    for results in named:
        assert bench(["distill", "--table", str(REPO / results)]) == 0
        rows = [line for line in capsys.readouterr().out.splitlines()
                if line.startswith("| ") and "---" not in line]
        assert len(rows) > 10
        missing = [row for row in rows if row not in readme]
        assert not missing, f"README's table from {results} differs: {missing[:3]}"


@pytest.mark.parametrize("script, expected", [
    # README: the same bursts paired with their round's median floor, and the ranges
    ("pairing_spread.py", ["  8192     logprob_ours   1  1.014 [0.998-1.043]  1.022 [1.016-1.036]",
                           "the floor bursts around it 0.0281, the round's median floor 0.0199"]),
    # README: the clocks of the GEMM and the log-prob forward at 32768 tokens
    ("clock_ratios.py", ["   32768,4096,151936             gemm    58.996   1320   699",
                         "   32768,4096,151936   logprob_ours@1    60.659   1365   697"]),
])
def test_the_readmes_analyses_of_a_stored_run_print_what_it_quotes(script, expected):
    # docs/cpu's scripts the README cites, on the stored run it names (CPU, no GPU)
    stored = REPO / "docs/h200/pass20/h100/r2/distill/results.json"
    out = subprocess.run([sys.executable, str(REPO / "docs" / "cpu" / script), str(stored)],
                         capture_output=True, text=True, check=True).stdout
    assert all(line in out for line in expected), out


def test_the_floor_between_single_calls_survives_a_method_or_the_floor_raising():
    # synchronized blocks with the floor between them: a method that raises mid-round is
    # dropped, the others go on; a floor that raises is not run again and no ratio is made
    ran = []
    boom = RuntimeError("out of memory")

    def method(name, fail_after=None):
        def fn(x):
            ran.append(name)
            if fail_after is not None and ran.count(name) > fail_after:
                raise boom
        return fn

    fns = {"gemm": method("gemm"), "a": method("a", fail_after=2), "b": method("b")}
    got, ratios = timing.synchronized(fns, [(0,)], 3, "gemm", calls=3, cuda=False,
                                      bracket=True, log=lambda s: None)
    assert got["a"].error and got["a"].ms == [] and "a" not in ratios
    assert len(got["b"].ms) == 3 and len(got["gemm"].ms) == 3 and ratios["b"][0] > 0
    ran.clear()
    fns = {"gemm": method("gemm", fail_after=3), "a": method("a"), "b": method("b")}
    got, ratios = timing.synchronized(fns, [(0,)], 2, "gemm", calls=2, cuda=False,
                                      bracket=True, log=lambda s: None)
    assert got["gemm"].error and ratios == {}
    assert ran.count("gemm") == 4  # two blocks of two calls, the second raising; not again


def test_the_distill_table_names_its_schedule(tmp_path):
    # single calls interleaved call by call are never bracketed by the floor: the header
    # says so; the bursts' floor runs between the methods (the default)
    out = tmp_path / "interleaved"
    assert bench(["distill", "--device", "cpu", "--shapes", "64,32,512", "--ks", "1",
                  "--methods", "logprob_ours", "--phases", "fwd", "--rounds", "2",
                  "--burst-ms", "2", "--heat-s", "0", "--sync", "--sync-order", "interleaved",
                  "--out", str(out)]) == 0
    head = (out / "table.md").read_text().split("\n\n")[1]
    assert "(interleaved: one call of each method in turn)" in head
    assert "the floor's burst before every method's and after the last" in head
    assert "(block)" not in head
