"""Install-time patching of megatron-core: find the core, check hashes, patch / verify /
unpatch.

Imports neither torch nor megatron.
"""

from .core import (
    MODIFIED,
    NATIVE,
    PATCHED,
    UNPATCHED,
    UNSUPPORTED,
    Core,
    State,
    Status,
    locate,
    patch,
    status,
    unpatch,
    verify,
)
from .errors import PatchError
from .patch_sets import PatchSet, find_patch_set, match_patch_set, supported_releases

__all__ = [
    "MODIFIED", "NATIVE", "PATCHED", "UNPATCHED", "UNSUPPORTED", "Core", "PatchError",
    "PatchSet", "State", "Status", "find_patch_set", "locate", "match_patch_set", "patch",
    "status", "supported_releases", "unpatch", "verify",
]
