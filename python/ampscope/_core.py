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
