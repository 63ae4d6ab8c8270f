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
    """The validated map dict from a path or a dict."""
    if isinstance(path_or_dict, dict):
        data, where = path_or_dict, "precision map"
    else:
        where = os.fspath(path_or_dict)
        if os.path.isdir(where):
            raise MapError(f"{where}: is a directory, not a precision map file")
        try:
            with open(where, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise MapError(f"{where}: cannot read: {e.strerror}") from None
        except UnicodeDecodeError:
            raise MapError(f"{where}: not valid JSON (binary data)") from None
        if not text.strip():
            raise MapError(f"{where}: file is empty")
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError):
            raise MapError(f"{where}: not valid JSON (truncated or corrupt file?)") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise MapError(f"{where}: not a precision map (schema must be {SCHEMA!r})")
    pins = data.get("pin_fp32")
    if not isinstance(pins, list) or not all(isinstance(p, str) for p in pins):
        raise MapError(f"{where}: pin_fp32 must be a list of layer names")
    return data


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
