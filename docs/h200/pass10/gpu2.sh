#!/usr/bin/env bash
# Pass 10, second device call: issue 20's ops in one run with pass 10's kernels: pass 8's
# r4 command as it stands (docs/h200/pass8/gpu4.sh).
#   bash docs/h200/pass10/gpu2.sh OUT      (from the repo root; the device's $OUT)
exec bash docs/h200/pass8/gpu4.sh "$@"
