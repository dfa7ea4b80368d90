"""megatron-overlay: megatron-core 0.18's ``output_processor`` hook on every core from 0.12,
and fused output processors (log-probs + entropy without materialized logits).

Importing this package imports neither torch nor megatron.
"""

__version__ = "0.1.0"

from .probe import has_output_processor, require_output_processor

__all__ = ["__version__", "has_output_processor", "require_output_processor"]
