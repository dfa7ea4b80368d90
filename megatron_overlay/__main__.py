"""``python -m megatron_overlay``: the ``megatron-overlay`` command (megatron_overlay/cli.py)."""

import sys

from .cli import main

if __name__ == "__main__":  # importing the module (pydoc, autodoc) runs nothing
    sys.exit(main())
