"""Precision maps: a pinned module (and everything inside it) runs with autocast off and its
floating inputs cast to float32; its outputs stay float32."""
import functools
import json
import os
import warnings

import torch

SCHEMA = "ampscope.precision_map/1"


class MapError(ValueError):
    """A precision map that cannot be used (one-line message)."""


def load_map(path_or_dict):
    """The validated map dict from a path or a dict. Read and checked by the compiled core, the
    same reader as the CLI's (`ampscope verify --map`, `demo --map`): one set of rules for BOM,
    NaN, 1e400, nesting depth, FIFOs and types, and the same one-line messages."""
    from . import _core
    if isinstance(path_or_dict, dict):
        try:
            text = json.dumps(path_or_dict, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise MapError(f"precision map: not representable as JSON ({e})") from None
        except RecursionError:
            raise MapError("precision map: nested too deeply") from None
        path, where = "", "precision map"
    else:
        path, text, where = os.fspath(path_or_dict), "", ""
        if not isinstance(path, str):
            path = os.fsdecode(path)
    try:
        return json.loads(_core.ops().read_precision_map(path, text, where))
    except RuntimeError as e:
        raise MapError(_core.one_line(e)) from None


def _to_fp32(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float32:
        return x.float()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_fp32(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_fp32(v) for k, v in x.items()}
    return x


def _device_type(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"


def pin_module(module):
    """Makes `module` run in float32 with autocast off. Idempotent."""
    if getattr(module, "_ampscope_pinned", False):
        return
    original = module.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        with torch.autocast(device_type=_device_type(args), enabled=False):
            return original(*_to_fp32(args), **_to_fp32(kwargs))

    module.forward = forward
    module._ampscope_pinned = True


def apply_to_names(names_to_modules, pins, prefix_ok=True):
    """Pins the modules named in `pins` found in `names_to_modules`; returns the names pinned."""
    pinned = []
    for name in pins:
        module = names_to_modules.get(name)
        if module is not None:
            pin_module(module)
            pinned.append(name)
    return pinned


def apply_precision_map(model, path_or_dict):
    """Pins the layers listed in the map (names as model.named_modules() gives them); warns about
    names the model does not have. Returns the names pinned."""
    data = load_map(path_or_dict)
    names = dict(model.named_modules())
    pinned = apply_to_names(names, data["pin_fp32"])
    unknown = [n for n in data["pin_fp32"] if n not in names]
    if unknown:
        warnings.warn(f"ampscope: precision map names not in the model: {', '.join(unknown)}",
                      stacklevel=2)
    return pinned
