"""``megatron-overlay demo``: its options, a quiet progress display, and the report.

The measuring lives in :mod:`.demo_measure` (torch and megatron); this module imports
neither at module level, so ``megatron-overlay --help`` stays fast.

While the demo runs, everything third-party code writes to stderr (megatron's "Apex is not
installed" warnings, torch's log lines, the profiler's notes) is held back, so that it does
not break up the progress bar; a one-line summary follows the results, and
``--show-warnings`` prints the held-back text after them.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import tempfile
import warnings

DEFAULTS = dict(tokens=2048, vocab=32000, hidden=256, temperature=0.7, warmup=1, repeats=5)
NUM_HEADS = 4  # demo_measure.NUM_HEADS, repeated here so that --help needs no torch


def _int_at_least(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum} ({what}), got {value}")
        return value

    return parse


def _tokens(text: str) -> int:
    value = _int_at_least(2, "two sequences of tokens/2 each")(text)
    if value % 2:
        raise argparse.ArgumentTypeError(f"must be even (2 sequences of tokens/2), got {value}")
    return value


def _hidden(text: str) -> int:
    value = _int_at_least(NUM_HEADS, f"{NUM_HEADS} attention heads")(text)
    if value % NUM_HEADS:
        raise argparse.ArgumentTypeError(
            f"must be a multiple of {NUM_HEADS} (the model's attention heads), got {value}")
    return value


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be finite and > 0, got {text} (1.0 is the unscaled distribution)")
    from .ops.temperature import validate_temperature
    try:  # the ops' own range (fp32's smallest normal number and up)
        validate_temperature(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).replace("temperature ", "", 1)) from None
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (give the parser ArgumentDefaultsHelpFormatter to show defaults)."""
    parser.add_argument("--tokens", type=_tokens, default=DEFAULTS["tokens"],
                        help="tokens per step, as 2 sequences of tokens/2 (even)")
    parser.add_argument("--vocab", type=_int_at_least(2, "vocabulary size"),
                        default=DEFAULTS["vocab"], help="vocabulary size")
    parser.add_argument("--hidden", type=_hidden, default=DEFAULTS["hidden"],
                        help=f"hidden size (a multiple of the {NUM_HEADS} attention heads)")
    parser.add_argument("--temperature", type=_temperature, default=DEFAULTS["temperature"],
                        help="softmax temperature T (finite, > 0)")
    parser.add_argument("--warmup", type=_int_at_least(0, "untimed steps"),
                        default=DEFAULTS["warmup"], help="untimed steps of each path first")
    parser.add_argument("--repeats", type=_int_at_least(1, "timed steps"),
                        default=DEFAULTS["repeats"],
                        help="timed steps of each path (the median is reported)")
    parser.add_argument("--show-warnings", action="store_true",
                        help="print third-party warnings after the results instead of a "
                             "one-line summary")


def _progress(total: int, desc: str, stream):
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="step", file=stream)
    except ImportError:  # a plain counter when tqdm is absent
        class Plain:
            def __init__(self):
                self.n = 0

            def update(self, k=1):
                self.n += k
                print(f"\r{desc}: {self.n}/{total}", end="", file=stream, flush=True)

            def close(self):
                print(file=stream)

        return Plain()


@contextlib.contextmanager
def _held_back_stderr(record_warnings: bool):
    """Send file descriptor 2 (Python's and C's stderr) to a temporary file; yield a stream
    to the real stderr (for the progress bar) and a function returning what was held back:
    the text, and the Python warnings when ``record_warnings`` (else the warning filters
    stay the user's, and what they let through is part of the text)."""
    sys.stderr.flush()
    saved_fd, saved_stream = os.dup(2), sys.stderr
    held = tempfile.TemporaryFile(mode="w+b")
    os.dup2(held.fileno(), 2)
    # sys.stderr is not always fd 2 (pytest, notebooks): point it there for the duration
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    real = os.fdopen(os.dup(saved_fd), "w", buffering=1)
    caught: list = []

    def read() -> tuple[str, list]:
        sys.stderr.flush()
        held.seek(0)
        return held.read().decode(errors="replace"), caught

    failed = True
    try:
        with warnings.catch_warnings(record=record_warnings) as recorded:
            if record_warnings:
                warnings.simplefilter("default")  # each distinct warning once, as usual
            try:
                yield real, read
                failed = False
            finally:
                caught.extend(recorded or [])
    finally:
        sys.stderr.close()  # the stream on fd 2 opened above (fd 2 itself stays open)
        sys.stderr = saved_stream
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        real.close()
        if failed:  # the demo is failing: what was held back may explain why
            text, _ = read()
            sys.stderr.write(_format_warnings(caught) + text)
            sys.stderr.flush()
        held.close()


def _format_warnings(caught: list) -> str:
    return "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line)
                   for w in caught)


def _summary(text: str, caught: list) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines and not caught:
        return ""
    kinds = sorted({w.category.__name__ for w in caught})
    first = str(caught[0].message).splitlines()[0] if caught else lines[0].strip()
    return (f"note: held back during the demo: {len(caught)} warning(s) from third-party "
            f"packages{' (' + ', '.join(kinds) + ')' if kinds else ''} and {len(lines)} other "
            f"line(s) of stderr, e.g. {first[:80]!r}; --show-warnings prints them")


def run_demo(args) -> int:
    # -W / PYTHONWARNINGS given: the user's warning filters apply (their output is held too)
    with _held_back_stderr(record_warnings=not sys.warnoptions) as (stream, read_held):
        from . import demo_measure  # torch and megatron: imported here, their output held

        # steps: the model's build, then warm-up, timed and memory steps of both paths
        bar = _progress(1 + 2 * (args.warmup + args.repeats + 1), "demo", stream)
        try:
            results, device = demo_measure.measure(args, bar.update)
        finally:
            bar.close()
        text, caught = read_held()
    _report(args, results, device)
    if args.show_warnings:
        shown = _format_warnings(caught) + text
        if shown.strip():
            print("\nheld back during the demo:\n" + shown.rstrip())
    else:
        note = _summary(text, caught)
        if note:
            print(note)
    return 0


def _report(args, results, device) -> None:
    from .demo_measure import BATCH, NUM_LAYERS, PATHS, median_ms

    seq = args.tokens // BATCH
    where, busy = device.type, ""
    if device.type == "cpu":
        import torch

        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        cores, threads = os.cpu_count() or 1, torch.get_num_threads()
        where = f"cpu, {threads} threads, {cores} cores, 1-min load average {load:.1f}"
        if load > cores and threads > 1:
            # measured on the project's shared 2-core machine (README, "The two commands"):
            # with 2 threads a step stalls whenever another process takes a core
            busy = (f"note: this machine is busy (load {load:.1f} on {cores} cores), so the "
                    f"times vary from run to run; OMP_NUM_THREADS=1 gives steadier ones")
    print(f"\nGPTModel: {NUM_LAYERS} layers, hidden {args.hidden}, vocab {args.vocab}, "
          f"{BATCH}x{seq} tokens, fp32, temperature {args.temperature}; on {where}")
    print(f"{'path':<21}{'fwd+bwd median':>15}{f'(min-max of {args.repeats})':>22}"
          f"{'peak memory':>14}")
    for name in PATHS:
        result = results[name]
        spread = f"{min(result.seconds) * 1e3:.1f}-{max(result.seconds) * 1e3:.1f} ms"
        print(f"{name:<21}{median_ms(result):>12.1f} ms{spread:>22}"
              f"{result.peak_bytes / 2**20:>10.1f} MiB")
    fused, ref = results[PATHS[0]], results[PATHS[1]]
    print(f"fused / materialized: {median_ms(fused) / median_ms(ref):.2f}x the time, "
          f"{fused.peak_bytes / max(ref.peak_bytes, 1):.2f}x the memory")
    print(f"max |log_probs diff| = {(fused.log_probs - ref.log_probs).abs().max().item():.3e}")
    print(f"max |entropy diff|   = {(fused.entropy - ref.entropy).abs().max().item():.3e}")
    print(f"peak memory: the most bytes torch's allocator held above the start of one "
          f"fwd+bwd step (activations, gradients, scratch); the logits tensor alone is "
          f"{BATCH * seq * args.vocab * 4 / 2**20:.4g} MiB in fp32")
    if busy:
        print(busy)
