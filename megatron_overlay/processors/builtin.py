"""Imports every built-in processor module so that each registers itself."""
