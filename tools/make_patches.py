#!/usr/bin/env python3
"""Regenerate ``patches/<release>/`` from the upstream megatron-core wheels.

For every supported release this downloads the wheel (``pip download --no-deps``), applies
the hook back-port as a few anchored text edits, and writes

    patches/<release>/output_processor.patch   unified diff, one section per touched file
    patches/<release>/manifest.json            sha256 of every upstream file and its result

The edits reproduce megatron-core 0.18.0's ``output_processor`` hook (GPTModel.forward,
GPTModel._postprocess, GPTModel.build_schedule_plan and the schedule-plan postprocess node)
plus the overlay's name lookup. Releases 0.18+ have the hook natively on GPTModel and get
the name lookup alone there. The hybrid model class (MambaModel before 0.18, HybridModel
from 0.18) has the hook in no release: every release gets GPTModel's contract back-ported
to its ``forward``. Every anchor must match exactly once, so an upstream change that moves
one fails loudly here instead of producing a wrong patch.

    python tools/make_patches.py                 # every release in RELEASES
    python tools/make_patches.py 0.13.1 0.19.2   # some
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: the package beside it (imports no torch)

from megatron_overlay.patching.core import LOCAL_LABEL  # noqa: E402  (the patch sets' label)

PATCHES = REPO / "patches"
PATCH_FILE = "output_processor.patch"

# Every release on the registry from 0.12.0 on. Python tag: 0.17+ publish cp312 wheels only.
RELEASES = [
    "0.12.0", "0.12.1", "0.12.2", "0.12.3", "0.13.0", "0.13.1", "0.14.0",
    "0.15.0", "0.15.1", "0.15.2", "0.15.3", "0.16.0", "0.16.1", "0.17.0", "0.17.1",
    "0.18.0", "0.18.2", "0.19.0", "0.19.2",
]
# Yanked releases whose touched files are byte-identical to a neighbour's: they are served
# by that neighbour's patch set (patching.patch_sets matches patch sets by file content).
SAME_FILES_AS = {"0.18.1": "0.18.0", "0.19.1": "0.19.0"}
FIRST_NATIVE = (0, 18)

GPT_MODEL = "megatron/core/models/gpt/gpt_model.py"
# The hybrid model class: MambaModel before 0.18, HybridModel (MambaModel its alias) after.
MAMBA_MODEL = "megatron/core/models/mamba/mamba_model.py"
HYBRID_MODEL = "megatron/core/models/hybrid/hybrid_model.py"
FIRST_HYBRID_MODEL = (0, 18)
SCHEDULE_PLAN = "megatron/core/models/common/model_chunk_schedule_plan.py"
CALLABLES = "megatron/core/models/gpt/fine_grained_callables.py"

HOOK_PARAMS_ANNOTATED = (
    "        output_processor: Optional[Callable[..., Tensor]] = None,\n"
    "        output_processor_context: Optional[Any] = None,\n"
)
NAME_LOOKUP = (
    "            if isinstance(output_processor, str):\n"
    "                # megatron-overlay: a built-in or registered processor, by name.\n"
    "                try:\n"
    "                    from megatron_overlay.processors import resolve\n"
    "                except ModuleNotFoundError as err:\n"
    "                    if err.name != \"megatron_overlay\":\n"
    "                        raise\n"
    "                    raise ModuleNotFoundError(\n"
    "                        f\"output_processor={output_processor!r} is a processor name, and \"\n"
    "                        \"names need the megatron-overlay package: pip install \"\n"
    "                        \"megatron-overlay (or pass the processor callable)\",\n"
    "                        name=err.name) from err\n"
    "                output_processor = resolve(output_processor)\n"
)


def hook_call(indent: str, loss_mask: str, scale_logits: str) -> str:
    """The 0.18.0 hook call, keyword for keyword, preceded by the overlay's name lookup."""
    body = [
        "if output_processor is not None:",
        *["    " + line[12:] for line in NAME_LOOKUP.splitlines()],
        "    return output_processor(",
        "        hidden_states=hidden_states,",
        "        output_layer=self.output_layer,",
        "        output_weight=output_weight,",
        "        labels=labels,",
        f"        loss_mask={loss_mask},",
        "        input_ids=input_ids,",
        "        position_ids=position_ids,",
        "        attention_mask=attention_mask,",
        "        decoder_input=decoder_input,",
        "        inference_context=inference_context,",
        "        packed_seq_params=packed_seq_params,",
        "        runtime_gather_output=runtime_gather_output,",
        "        context=output_processor_context,",
        "        compute_language_model_loss=self.compute_language_model_loss,",
        f"        scale_logits={scale_logits},",
        "        config=self.config,",
        "    )",
    ]
    return "\n" + "".join((indent + line).rstrip() + "\n" for line in body)


class Edit:
    """Text edits on one file; each anchor must occur exactly once."""

    def __init__(self, text: str, name: str):
        self.text, self.name = text, name

    def _find(self, anchor: str, start: int = 0) -> int:
        count = self.text.count(anchor, start)
        if count != 1:
            raise SystemExit(f"{self.name}: anchor found {count} times: {anchor!r}")
        return self.text.index(anchor, start)

    def insert_after(self, anchor: str, new: str, start: int = 0) -> None:
        at = self._find(anchor, start) + len(anchor)
        self.text = self.text[:at] + new + self.text[at:]

    def replace(self, old: str, new: str) -> None:
        at = self._find(old)
        self.text = self.text[:at] + new + self.text[at + len(old):]

    def block_end(self, opener: str, closer: str) -> int:
        """Offset of the first ``closer`` after the unique ``opener``."""
        at = self._find(opener)
        end = self.text.index(closer, at)
        return end

    def insert_at(self, offset: int, new: str) -> None:
        self.text = self.text[:offset] + new + self.text[offset:]


def add_typing_names(edit: Edit, names: list[str]) -> None:
    match = re.search(r"^from typing import (.+)$", edit.text, flags=re.M)
    have = [n.strip() for n in match.group(1).split(",")]
    merged = sorted(set(have) | set(names))
    edit.replace(match.group(0), "from typing import " + ", ".join(merged))


def patch_gpt_model(src: str, version: tuple[int, int]) -> str:
    e = Edit(src, GPT_MODEL)
    if version >= FIRST_NATIVE:
        # Native hook: add only the name lookup, inside _postprocess's hook branch.
        e.insert_after("        if output_processor is not None:\n", NAME_LOOKUP)
        return e.text

    add_typing_names(e, ["Any", "Callable"])
    # forward(..., *, output_processor=None, output_processor_context=None)
    e.insert_at(e.block_end("    def forward(\n", "    ) -> Tensor:\n"), HOOK_PARAMS_ANNOTATED)
    post_return = "        if not self.post_process:\n            return hidden_states\n"
    # Before 0.17 there is no MuP, and 0.18's _scale_logits is the identity for such configs.
    scale = "lambda logits: logits" if version < (0, 17) else "self._scale_logits"

    if version < (0, 13):
        # 0.12: no _postprocess; the hook sits in forward, after the MTP block.
        e.insert_after(post_return, hook_call("        ", "loss_mask", scale))
        return e.text

    # forward -> _postprocess
    call = e.block_end("        return self._postprocess(\n", "        )\n")
    e.insert_at(call, "            output_processor=output_processor,\n"
                      "            output_processor_context=output_processor_context,\n")
    e.insert_at(e.block_end("    def _postprocess(\n", "    ):\n"),
                "        output_processor=None,\n        output_processor_context=None,\n")
    if version < (0, 14):
        e.insert_after(post_return, hook_call("        ", "loss_mask", scale))
    else:
        loss_mask = "loss_mask"
        if version < (0, 17):
            # 0.14-0.16 roll loss_mask in place for MTP; 0.18 hands the hook the caller's.
            loss_mask = "caller_loss_mask"
            e.insert_after(post_return, "\n        # 0.18 gives output_processor the caller's loss_mask; MTP below rolls it.\n"
                                        "        caller_loss_mask = loss_mask\n")
        e.insert_after("        sequence_parallel_override = False\n",
                       hook_call("        ", loss_mask, scale))
        # build_schedule_plan(..., *, output_processor=None, output_processor_context=None)
        e.insert_at(e.block_end("    def build_schedule_plan(\n", "    ):\n"),
                    "        *,\n" + HOOK_PARAMS_ANNOTATED)
        e.insert_at(e.block_end("        return TransformerModelChunkSchedulePlan(\n", "        )\n"),
                    "            output_processor=output_processor,\n"
                    "            output_processor_context=output_processor_context,\n")
    return e.text


# Lines the hybrid patch inserts (0.12-0.15) and the line it inserts after (0.18+).
PACKED_SEQ_REFUSAL = (
    '        if packed_seq_params is not None:\n'
    '            raise ValueError(\n'
    '                "packed_seq_params: MambaModel of this megatron-core release cannot "\n'
    '                "pack sequences (its MambaStack takes no packed_seq_params; 0.16 "\n'
    '                "added them); pass None, or upgrade megatron-core"\n'
    '            )\n'
)
GRAPH_CHECK_DOC = '        Check if we should call the local cudagraph path.\n        """\n'


def hybrid_class(version: tuple[int, int]) -> str:
    return "HybridModel" if version >= FIRST_HYBRID_MODEL else "MambaModel"


def hybrid_model_path(version: tuple[int, int]) -> str:
    return HYBRID_MODEL if version >= FIRST_HYBRID_MODEL else MAMBA_MODEL


def patch_hybrid_model(src: str, version: tuple[int, int]) -> str:
    """GPTModel 0.18's hook on the hybrid model's ``forward``, which has no ``_postprocess``:
    the same keyword-only parameters, the same 16 keyword arguments, called at the place in
    ``forward`` where GPTModel's ``_postprocess`` calls it (after MTP, before the output
    layer and the inference last-token slice)."""
    e = Edit(src, hybrid_model_path(version))
    add_typing_names(e, ["Any", "Callable"])
    signature_end = e.block_end("    def forward(\n", "    ) -> Tensor:\n")
    e.insert_at(signature_end, HOOK_PARAMS_ANNOTATED)
    # Keywords GPTModel's (and later hybrid releases') forward has and this one lacks, so that
    # every model takes the same call: loss_mask (0.17+) goes to the processor only, as
    # before the default path ignores it; packed_seq_params (0.16+) must be None before 0.16.
    missing = ""
    if version < (0, 17):
        missing += "        loss_mask: Optional[Tensor] = None,\n"
    if version < (0, 16):
        missing += "        packed_seq_params: Optional[PackedSeqParams] = None,\n"
        e.insert_after("from megatron.core.inference.contexts import BaseInferenceContext\n",
                       "from megatron.core.packed_seq_params import PackedSeqParams\n")
        e.insert_after(
            "        inference_context = deprecate_inference_params(inference_context, "
            "inference_params)\n",
            PACKED_SEQ_REFUSAL)
    if missing:
        e.insert_after("        inference_params: Optional[BaseInferenceContext] = None,\n",
                       missing, start=e._find("    def forward(\n"))
    scale = "lambda logits: logits" if version < (0, 17) else "self._scale_logits"
    if version < (0, 16):
        # no inference last-token gather yet: right after output_weight is known
        e.insert_after("            output_weight = self.shared_embedding_or_output_weight()\n",
                       hook_call("        ", "loss_mask", scale))
    else:
        e.insert_after("        sequence_parallel_override = False\n",
                       hook_call("        ", "loss_mask", scale))
    if version >= FIRST_HYBRID_MODEL:
        # Block-scope inference CUDA graphs replay a whole forward recorded earlier, which
        # would drop the processor; GPTModel has no such path and runs it eagerly: so here.
        e.insert_after(GRAPH_CHECK_DOC,
                       "        if kwargs.get('output_processor') is not None:\n"
                       "            return False  # megatron-overlay: processors run eagerly\n")
    return e.text


def patch_schedule_plan(src: str) -> str:
    e = Edit(src, SCHEDULE_PLAN)
    add_typing_names(e, ["Any", "Callable"])
    cls = e._find("class TransformerModelChunkSchedulePlan(")
    init = e.text.index("    def __init__(\n", cls)
    e.insert_at(e.text.index("    ):\n", init), "        *,\n" + HOOK_PARAMS_ANNOTATED)
    e.insert_after("        self._model_chunk_state.runtime_gather_output = runtime_gather_output\n",
                   "        self._model_chunk_state.output_processor = output_processor\n"
                   "        self._model_chunk_state.output_processor_context = "
                   "output_processor_context\n")
    return e.text


def patch_callables(src: str) -> str:
    e = Edit(src, CALLABLES)
    e.insert_after("            extra_block_kwargs=self.chunk_state.extra_block_kwargs,\n",
                   "            output_processor=self.chunk_state.output_processor,\n"
                   "            output_processor_context=self.chunk_state.output_processor_context,\n",
                   start=e._find("        loss = self.gpt_model._postprocess(\n"))
    return e.text


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fetch_wheel(release: str, cache: Path) -> Path:
    found = sorted(cache.glob(f"megatron_core-{release}-*.whl"))
    if not found:
        py = "3.12" if tuple(map(int, release.split(".")[:2])) >= (0, 17) else "3.11"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--python-version", py, "--platform", "manylinux_2_28_x86_64",
             f"megatron-core=={release}", "-d", str(cache)], check=True)
        found = sorted(cache.glob(f"megatron_core-{release}-*.whl"))
    return found[0]


def make_patch_set(release: str, cache: Path) -> dict:
    version = tuple(int(p) for p in release.split(".")[:2])
    native = version >= FIRST_NATIVE
    with zipfile.ZipFile(fetch_wheel(release, cache)) as wheel:
        upstream = {name: wheel.read(name).decode() for name in
                    (GPT_MODEL, SCHEDULE_PLAN, CALLABLES, hybrid_model_path(version))
                    if name in wheel.namelist()}
    patched = {GPT_MODEL: patch_gpt_model(upstream[GPT_MODEL], version)}
    if (0, 14) <= version < FIRST_NATIVE:
        patched[SCHEDULE_PLAN] = patch_schedule_plan(upstream[SCHEDULE_PLAN])
        patched[CALLABLES] = patch_callables(upstream[CALLABLES])
    hybrid = hybrid_model_path(version)
    patched[hybrid] = patch_hybrid_model(upstream[hybrid], version)

    diff = []
    files = []
    for name, new in patched.items():
        old = upstream[name]
        diff += difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                     f"a/{name}", f"b/{name}", n=3)
        files.append({"path": name, "upstream_sha256": sha256(old.encode()),
                      "patched_sha256": sha256(new.encode())})
        compile(new, name, "exec")  # the result must at least parse
    out = PATCHES / release
    out.mkdir(parents=True, exist_ok=True)
    (out / PATCH_FILE).write_text("".join(diff))
    manifest = {
        "release": release,
        "patch_set": f"{release}+{LOCAL_LABEL}",
        "hook": "native" if native else "backport",
        # each model class whose forward takes the hook once patched: native upstream, or
        # back-ported by this patch set
        "models": {"GPTModel": "native" if native else "backport",
                   hybrid_class(version): "backport"},
        "patch": PATCH_FILE,
        "files": files,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    print(f"{release}: {len(files)} file(s), +{added} lines ({manifest['hook']})")
    return manifest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="*", default=RELEASES)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "megatron-core-wheels")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    for release in args.releases:
        make_patch_set(release, args.cache)


if __name__ == "__main__":
    main()
