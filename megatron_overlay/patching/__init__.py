"""Install-time patching of megatron-core: find the core, check hashes, apply / verify / revert.

Imports neither torch nor megatron.
"""

from .core import (
    MODIFIED,
    NATIVE,
    PATCHED,
    UNPATCHED,
    UNSUPPORTED,
    Core,
    PatchError,
    Status,
    apply,
    locate,
    revert,
    status,
    verify,
)
from .patch_sets import PatchSet, find_patch_set, match_patch_set, supported_releases

__all__ = [
    "MODIFIED", "NATIVE", "PATCHED", "UNPATCHED", "UNSUPPORTED", "Core", "PatchError",
    "PatchSet", "Status", "apply", "find_patch_set", "locate", "match_patch_set", "revert",
    "status",
    "supported_releases", "verify",
]
