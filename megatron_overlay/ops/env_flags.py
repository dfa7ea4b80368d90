"""The ops' on/off environment variables, all read alike.

1 / true / yes / on and 0 / false / no / off (any case, spaces around ignored); unset or
empty: the default. Anything else raises ``ValueError`` naming the variable: a typo
(``=ture``, ``=flase``) used to mean one of the two without a word.
"""

from __future__ import annotations

import os

_VALUES = {"1": True, "true": True, "yes": True, "on": True,
           "0": False, "false": False, "no": False, "off": False}


def env_flag(name: str, default: bool, meaning: str) -> bool:
    """``$name`` as a bool, ``default`` where unset or empty; ``meaning``: what 1 and 0 do,
    for the error."""
    value = os.environ.get(name, "")
    if not value.strip():
        return default
    flag = _VALUES.get(value.strip().lower())
    if flag is None:
        raise ValueError(f"{name}={value!r}: set it to 1 or 0 ({meaning}), or unset it "
                         f"(default {int(default)})")
    return flag
