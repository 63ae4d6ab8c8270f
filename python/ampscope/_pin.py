"""Precision maps: a pinned module (and everything inside it) runs with autocast off and its
floating inputs cast to float32; its outputs stay float32 (in a model converted to low
precision as a whole, see pin_module, they go back to the input's dtype)."""
import copy
import functools
import json
import os
import warnings

import torch
from torch.nn.utils.stateless import _reparametrize_module  # what torch.func.functional_call uses

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


def _map_tensors(x, fn):
    """x with fn applied to each tensor in it, through lists, tuples (named ones too) and dicts
    (a dict of another type copied as such: HF's ModelOutput sets attributes too)."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_map_tensors(v, fn) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(_map_tensors(v, fn) for v in x)
    if type(x) is dict:  # (kwargs: a comprehension, which dynamo traces without a break)
        return {k: _map_tensors(v, fn) for k, v in x.items()}
    if isinstance(x, dict):
        out = copy.copy(x)
        for k, v in x.items():
            out[k] = _map_tensors(v, fn)
        return out
    return x


def _to_fp32(x):
    return _map_tensors(x, lambda t: t.float() if t.is_floating_point() and t.dtype != torch.float32
                        else t)


def _cast_floating(x, dtype):
    """x with its float32 tensors cast to dtype."""
    return _map_tensors(x, lambda t: t.to(dtype) if t.dtype == torch.float32 else t)


def _device_type(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cuda" if torch.cuda.is_available() and torch.cuda.is_initialized() else "cpu"


def _low_precision_state(module):
    """{name: float32 copy} of the module's float16/bfloat16 parameters and buffers (a model
    converted to low precision as a whole, no autocast), and their dtype; ({}, None) if none."""
    state, dtype = {}, None
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if t is not None and t.dtype in (torch.float16, torch.bfloat16):
            state[name], dtype = t.float(), dtype or t.dtype
    return state, dtype


def _first_floating_dtype(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            return a.dtype
    return None


def pin_module(module):
    """Makes `module` run in float32 with autocast off. Idempotent.

    In a model converted to float16/bfloat16 as a whole (`model.half()`, `torch_dtype=`), the
    module's own parameters are low precision too: the call then runs on float32 copies of them
    (gradients flow back to the stored ones, as through autocast's casts) and its floating
    outputs are cast back to the dtype its input had, which the next layer expects."""
    if getattr(module, "_ampscope_pinned", False):
        return
    original = module.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        with torch.autocast(device_type=_device_type(args), enabled=False):
            state, low = _low_precision_state(module)
            if not state:
                return original(*_to_fp32(args), **_to_fp32(kwargs))
            back = _first_floating_dtype(args, kwargs) or low
            with _reparametrize_module(module, state):
                out = original(*_to_fp32(args), **_to_fp32(kwargs))
            return _cast_floating(out, back) if back != torch.float32 else out

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
