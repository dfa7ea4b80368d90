#!/usr/bin/env bash
# Pass 12, second device call: issue 20's point 4, every op in one run with the project's
# entry point, both protocols (pass 8's command, docs/h200/pass8/gpu4.sh); the run's
# OUT/distill/table.md is what the README's one-run tables become.
#   bash docs/h200/pass12/gpu2.sh OUT      (from the repo root; carry .venv/wheelhouse)
exec bash docs/h200/pass8/gpu4.sh "$@"
