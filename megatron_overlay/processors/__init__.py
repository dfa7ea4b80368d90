"""Output processors for the ``output_processor`` hook, selectable by name.

The built-ins are listed in ``registry.BUILTINS``. Importing this package does not import
torch; resolving a name does.
"""

from .registry import BUILTINS, ENTRY_POINT_GROUP, available, register, resolve

__all__ = ["BUILTINS", "ENTRY_POINT_GROUP", "available", "register", "resolve"]
