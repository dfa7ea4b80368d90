"""Run the README's API examples (the ```python blocks marked ``<!-- ci: api -->``), as
written, on a real tiny GPTModel of the installed core; prints one JSON line.

    python readme_worker.py

Each block runs in a fresh namespace holding the names the README's prose gives it:
``model`` (a GPTModel, tied embeddings), ``input_ids``, ``position_ids``,
``attention_mask``, ``labels``, ``loss_mask``; ``teacher``, ``student`` and ``T`` for the
distillation step; ``hidden [N, H]``, ``weight [V, H]``, ``token_labels [N]`` for the op
alone; and ``torch``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from megatron_overlay import model_builder  # noqa: E402

BLOCK = re.compile(r"<!-- ci: api -->\n```python\n(?P<body>.*?)```", re.S)


def namespace() -> dict:
    import torch

    cfg = model_builder.ModelConfig()
    input_ids, position_ids, mask, labels, loss_mask = model_builder.batch(cfg)
    gen = torch.Generator().manual_seed(3)
    return dict(
        torch=torch, model=model_builder.build_model(cfg), input_ids=input_ids,
        position_ids=position_ids, attention_mask=mask, labels=labels, loss_mask=loss_mask,
        teacher=model_builder.build_model(cfg, seed=1), student=model_builder.build_model(cfg, seed=2),
        T=0.7, hidden=torch.randn(64, cfg.hidden, generator=gen, requires_grad=True),
        weight=torch.randn(cfg.vocab, cfg.hidden, generator=gen),
        token_labels=torch.randint(0, cfg.vocab, (64,), generator=gen))


def main() -> None:
    model_builder.init_distributed(0, 1, model_builder.free_port(), 1)
    results = []
    for match in BLOCK.finditer((REPO / "README.md").read_text()):
        body = match["body"]
        try:
            exec(compile(body, "README.md", "exec"), namespace())  # noqa: S102
            results.append({"first_line": body.splitlines()[0], "ok": True})
        except Exception as err:  # what the test reports
            results.append({"first_line": body.splitlines()[0], "ok": False,
                            "error": f"{type(err).__name__}: {err}"})
    print(json.dumps(results))
    model_builder.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    main()
