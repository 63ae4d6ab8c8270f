"""Loads ampscope's compiled core into this torch process (torch.ops.ampscope.*)."""
import os

import torch

_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ampscope.so")
_loaded = False


def ops():
    """The torch.ops.ampscope namespace, loading the library on first use."""
    global _loaded
    if not _loaded:
        if not os.path.exists(_LIB):
            raise ImportError(f"ampscope: compiled core not found at {_LIB}: run `make` first")
        torch.ops.load_library(_LIB)
        _loaded = True
    return torch.ops.ampscope


def one_line(exc):
    """The first line of a core error's message (torch may append C++ context lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def terminal_safe(s):
    """`s` with control and bidi characters escaped, by the core's helper (as summary prints)."""
    return ops().terminal_safe(str(s))
