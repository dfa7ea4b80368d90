"""``python -m megatron_overlay``: the ``megatron-overlay`` command (megatron_overlay/cli.py)."""

import sys

from .cli import main

sys.exit(main())
