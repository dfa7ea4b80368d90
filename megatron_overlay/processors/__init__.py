"""Output processors for the ``output_processor`` hook, selectable by name."""

from .registry import ENTRY_POINT_GROUP, available, register, resolve

__all__ = ["ENTRY_POINT_GROUP", "available", "register", "resolve"]
