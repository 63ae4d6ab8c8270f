"""Whose layers a compiled graph computes: the module a dynamo frame's locals hold.

dynamo names a graph's layers by source paths relative to the frame it compiles
("L['self'].wo"). For a model compiled whole that frame is the model's forward; after a graph
break inside a submodule it is the submodule's own forward (or a resume function holding the
next module as "L['___stack0']"), so the paths are relative to a module the path does not
name. At forward compile time the frame's locals are at hand: a path's root source is resolved
to the module object and from it to its qualified name.

One graph can serve several modules: dynamo guards a module local by its type and by the
attributes the trace read, not by identity, so FFN.forward compiled for layers.0 runs for
layers.1 as well when nothing guarded differs. A name is baked into the graph only where no
other module of the same type would pass those guards; otherwise the paths stay relative and
the frame is reported as shared."""
import re

import torch

_ROOT = re.compile(r"^[LG]\['[^']*'\](?:\[\d+\])*")
_STEP = re.compile(r"\.(\w+)|\['([^']*)'\]|\[(\d+)\]")
_COMPARED = {"CONSTANT_MATCH", "EQUALS_MATCH", "ID_MATCH", "TENSOR_MATCH", "DICT_KEYS_MATCH"}
_MISSING = object()


def root_source(path):
    """"L['self']" of "L['self'].h.0.attn"; "L['args'][0]" of "L['args'][0].model"."""
    match = _ROOT.match(path)
    return match.group(0) if match else None


def _walk(obj, steps):
    """Follows ".attr", "['key']", "[0]" from obj; _MISSING where a step does not apply or
    the text is not such a chain."""
    pos = 0
    while pos < len(steps):
        match = _STEP.match(steps, pos)
        if match is None:
            return _MISSING
        attr, key, index = match.groups()
        try:
            if attr is not None:
                obj = getattr(obj, attr)
            elif key is not None:
                obj = obj[key]
            else:
                obj = obj[int(index)]
        except Exception:  # a property that raises is a step that does not apply
            return _MISSING
        pos = match.end()
    return obj


def _same(kind, a, b):
    if a is _MISSING or b is _MISSING:
        return a is b
    if kind == "ID_MATCH":
        return a is b
    if kind == "TENSOR_MATCH":
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.dtype == b.dtype and a.shape == b.shape)
    if kind == "DICT_KEYS_MATCH":
        return isinstance(a, dict) and isinstance(b, dict) and list(a) == list(b)
    try:
        return bool(a == b)
    except Exception:  # an == that does not give a bool: cannot tell them apart
        return True


def could_share(source, module, other, guards):
    """Whether `other` (a module of module's type) passes the value guards the frame holds on
    `source` (which names `module`), as far as they can be read here."""
    for guard in guards:
        name = guard.name
        if not name.startswith(source) or name[len(source):len(source) + 1] not in ("", ".", "["):
            continue
        kind = guard.create_fn_name()
        if kind not in _COMPARED:
            continue
        steps = name[len(source):]
        mine = _walk(module, steps)
        if mine is _MISSING:
            continue  # a chain this walk cannot follow: no evidence either way
        if not _same(kind, mine, _walk(other, steps)):
            return False
    return True


def _unwrap(module):
    """torch.compile's wrapper stands for the module it compiled."""
    orig = module._modules.get("_orig_mod")
    return orig if isinstance(orig, torch.nn.Module) else module


def current_frame():
    """(f_locals, guards) of the frame dynamo is compiling now, or None (a
    backward compiled lazily, another compiler)."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator
        tx = InstructionTranslator.current_tx()
    except Exception:
        return None
    if tx is None:
        return None
    try:
        return tx.f_locals, list(tx.output.guards)
    except Exception:
        return None


def compile_id():
    """The id dynamo gave this compile (shared by its forward and its backward graphs)."""
    try:
        cid = torch._guards.CompileContext.current_compile_id()
    except Exception:
        return None
    return None if cid is None else str(cid)


class Scopes:
    """Per compile: root source -> qualified module name, or None where the graph may serve
    several modules (then `shared` lists them)."""

    def __init__(self, name_of, same_type):
        self.name_of = name_of        # module -> qualified name (None if not tracked)
        self.same_type = same_type    # module -> the other tracked modules of its type
        self._by_compile = {}
        self.shared = []              # (type name, [names]) per module type whose graphs are shared

    def frame_key(self):
        """What the graph's names depend on (part of its cache key): the names of the modules
        the compiling frame's locals hold; for a backward, its forward's."""
        return ",".join(f"{source}={name}" for source, name in sorted(self.current().items()))

    def current(self):
        """{root source: qualified name, or None where the graph may serve several modules}
        for the module-valued locals of the frame being compiled; a backward, compiled later
        without its frame, gets its forward's (the two share a compile id)."""
        cid = compile_id()
        frame = current_frame()
        if frame is None:  # torch._dynamo.reset() reuses ids: only a backward looks them up
            return self._by_compile.get(cid, {})
        f_locals, guards = frame
        scopes = {}
        for local, value in f_locals.items():
            items = value if isinstance(value, (tuple, list)) else [value]
            for i, item in enumerate(items):
                if isinstance(item, torch.nn.Module):
                    source = f"L['{local}']" if item is value else f"L['{local}'][{i}]"
                    try:
                        scopes[source] = self._resolve(source, item, guards)
                    except Exception:  # never break a compile: relative names, as before
                        scopes[source] = None
        if cid is not None:
            self._by_compile[cid] = scopes
        return scopes

    def _resolve(self, source, module, guards):
        module = _unwrap(module)
        name = self.name_of(module)
        if name is None:
            return None
        sharing = [other for other in self.same_type(module)
                   if could_share(source, module, other, guards)]
        if sharing:
            names = sorted(filter(None, (self.name_of(m) for m in [module, *sharing])))
            entry = (type(module).__name__, names)
            if entry not in self.shared:
                self.shared.append(entry)
            return None
        return name
