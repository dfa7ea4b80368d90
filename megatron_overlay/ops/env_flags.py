"""The ops' environment settings, all read alike, and read cheaply.

Flags: 1 / true / yes / on and 0 / false / no / off (any case, spaces around ignored);
unset or empty: the default. Anything else raises ``ValueError`` naming the variable: a
typo (``=ture``, ``=flase``) used to mean one of the two without a word.

Every op call reads its settings afresh (a test or a benchmark may switch one between
calls), three of them before its first kernel launch: ``os.environ.get`` encodes the name
and decodes the value each time (0.81 us a read of an unset variable against 0.30 here,
on an H100 host: docs/BENCHMARKS.md, pass 28, r2), so ``env_value`` looks the name up in
os.environ's own mapping (which every change made through os.environ keeps current; a
bare ``os.putenv`` changes neither) and decodes a value once; ``env_flag`` parses a value
once.
"""

from __future__ import annotations

import os

_VALUES = {"1": True, "true": True, "yes": True, "on": True,
           "0": False, "false": False, "no": False, "off": False}
_ENCODED: dict = {}   # name -> os.environ's key for it
_DECODED: dict = {}   # os.environ's raw value -> str
_FLAGS: dict = {}     # (name, default, value) -> bool
_CACHE_MAX = 256      # values seen; a program that sets values without end refills it


def env_value(name: str) -> str:
    """``os.environ.get(name, "")``."""
    environ = os.environ
    data = getattr(environ, "_data", None)
    encode = getattr(environ, "encodekey", None)
    if type(data) is not dict or encode is None:  # not CPython's os._Environ
        return environ.get(name, "")
    key = _ENCODED.get(name)
    if key is None:
        key = _ENCODED[name] = encode(name)
    raw = data.get(key)
    if raw is None:
        return ""
    value = _DECODED.get(raw)
    if value is None:
        if len(_DECODED) >= _CACHE_MAX:
            _DECODED.clear()
        value = _DECODED[raw] = environ.decodevalue(raw)
    return value


def env_flag(name: str, default: bool, meaning: str) -> bool:
    """``$name`` as a bool, ``default`` where unset or empty; ``meaning``: what 1 and 0 do,
    for the error."""
    value = env_value(name)
    flag = _FLAGS.get((name, default, value))
    if flag is not None:
        return flag
    if not value.strip():
        flag = default
    else:
        flag = _VALUES.get(value.strip().lower())
        if flag is None:
            raise ValueError(f"{name}={value!r}: set it to 1 or 0 ({meaning}), or unset it "
                             f"(default {int(default)})")
    if len(_FLAGS) >= _CACHE_MAX:
        _FLAGS.clear()
    _FLAGS[name, default, value] = flag
    return flag
