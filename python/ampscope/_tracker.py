"""Layer attribution for Python models: global module forward hooks give the core its layer
scopes. Names are the qualified named_modules() names of the outermost module; a module built on
the fly inside a forward (not in any registered tree) counts as its innermost registered parent;
several unrelated root models keep distinct names (later roots are prefixed by their class)."""
import gc
import threading
import warnings
import weakref
from typing import NamedTuple

import torch
from torch.nn.modules.module import (register_module_forward_hook,
                                      register_module_forward_pre_hook)
from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                   register_optimizer_step_pre_hook)

from . import _core, _updates, _watch

_COMPILE_HOOKS_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"


class _Info(NamedTuple):
    """What the hooks need of a registered module on every call."""
    name: str        # qualified named_modules() name
    lid: int         # the core's layer id
    type: str        # type(module).__name__
    parent: bool     # holds other modules (its output is checked on a watched step)
    compiled: bool   # torch.compile's wrapper standing for the module it compiled


def _is_dtensor(t):
    dtensor = getattr(getattr(torch.distributed, "tensor", None), "DTensor", None)
    return dtensor is not None and isinstance(t, dtensor)


class Tracker:
    def __init__(self, stop=None):
        self._stop = stop  # exception class raised once the first NaN/Inf is seen (or None)
        self._names = weakref.WeakKeyDictionary()  # module -> qualified name
        self._info = {}  # id(module) -> _Info, while the module lives (the hooks' fast path)
        self._prefixes = set()
        self._local = threading.local()
        self._handles = []
        self._params = {}         # id(param) -> qualified name of its first owner (tied: once)
        self._owners = {}         # id(param) -> (name, layer, layer type) of that owner
        self.root_callbacks = []  # called with (root, names) when a new root is registered
        self.compiled = []        # names of torch.compile'd modules seen
        self.compiled_prefix = ""  # name of the compiled module last entered (for _compile)
        self._sharded = []        # (weakref(param), name, layer, type) of DTensor parameters
        self._step_owner = None   # weakref to the optimizer whose steps end training steps
        self._manual_steps = False    # ampscope.step() marks steps (optimizers no longer do)
        self._optimizer_marked = False  # an optimizer ended the step since the last step()

    # -- names
    def register_root(self, root, prefix=None):
        if root in self._names:
            return
        if prefix is None:
            prefix = "" if not self._prefixes else self._unique(type(root).__name__)
        self._prefixes.add(prefix)
        names = {}
        ops = _core.ops()
        for name, module in root.named_modules(remove_duplicate=True):
            if module in self._names:
                continue
            full = ".".join(p for p in (prefix, name) if p)
            self._names[module] = full
            names[full] = module
            layer_type = type(module).__name__
            info = _Info(full, ops.layer_id(full, layer_type), layer_type, bool(module._modules),
                         False)
            self._remember(module, info)
            self._hook_params(module, info)
        for callback in self.root_callbacks:
            callback(root, names)

    def _remember(self, module, info):
        self._info[id(module)] = info
        weakref.finalize(module, self._info.pop, id(module), None)

    def _hook_params(self, module, info):
        """One gradient hook per parameter, however many names reach it (tied weights such as
        T5's shared/lm_head): the first name owns it, the others are its aliases. The hooks are
        C++ (no Python call, no GIL per gradient)."""
        layer, layer_type = info.name, info.type
        ops = _core.ops()
        for pname, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            full = f"{layer}.{pname}" if layer else pname
            owner = self._params.get(id(param))
            if owner is not None:
                ops.param_alias(owner, full)
                continue
            self._params[id(param)] = full
            self._owners[id(param)] = (full, layer, layer_type)
            if _is_dtensor(param):
                # FSDP2 assigns a sharded parameter's .grad itself (reduce-scatter), so no hook
                # fires: its local shard is read at the optimizer step
                ops.name_param(param, layer, layer_type)
                self._sharded.append((weakref.ref(param), full, layer, layer_type))
                continue
            ops.hook_param(param, full, info.lid)

    @staticmethod
    def _owner(module):
        """The module whose _modules holds `module` (a parent not seen yet), or None."""
        for ref in gc.get_referrers(module):
            if not isinstance(ref, dict):
                continue
            for holder in gc.get_referrers(ref):  # the parent, or its instance __dict__
                if isinstance(holder, torch.nn.Module) and holder._modules is ref:
                    return holder
                if isinstance(holder, dict) and holder.get("_modules") is ref:
                    for parent in gc.get_referrers(holder):
                        if isinstance(parent, torch.nn.Module) and parent.__dict__ is holder:
                            return parent
        return None

    def _outermost(self, module):
        """The root of the model that owns `module`: calling a submodule first (e.g.
        model.get_input_embeddings()(ids)) must not make it a root of its own."""
        seen = {id(module)}
        while True:
            parent = self._owner(module)
            # torch.compile's wrapper holds the model as _orig_mod: the model is the root
            if parent is None or id(parent) in seen or parent in self._names or self._is_compiled(parent):
                return module
            seen.add(id(parent))
            module = parent

    def name_of(self, module):
        """The qualified name of a module of a registered model, or None."""
        return self._names.get(module)

    def same_type(self, module):
        """The other modules of registered models whose type is module's."""
        return [m for m in list(self._names.keys()) if type(m) is type(module) and m is not module]

    def _unique(self, base):
        name, n = base, 2
        while name in self._prefixes:
            name, n = f"{base}.{n}", n + 1
        return name

    def _stack(self):
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    # -- hooks
    def _discover(self, module, stack):
        """The _Info of a module met for the first time: a root registers its whole tree; a
        torch.compile wrapper stands for the module it compiled; None for a module built on the
        fly inside a forward (it stays in its parent's scope)."""
        target = self._unwrap_compiled(module)
        info = self._info.get(id(target))
        if info is None and not stack:
            self.register_root(self._outermost(target))
            info = self._info.get(id(target))
        if info is not None and target is not module:
            info = info._replace(compiled=True)
            self._remember(module, info)
        return info

    def _pre(self, module, args):
        if torch.compiler.is_compiling():
            return  # inside a compiled region: dynamo must not trace ampscope (not observed)
        stack = self._stack()
        info = self._info.get(id(module)) or self._discover(module, stack)
        if info is None:
            stack.append(None)
            return
        if info.compiled:
            self.compiled_prefix = info.name  # its graphs' layer names are relative to it
        ops = _core.ops()
        local = self._local
        if not stack:  # a forward starts: is its step watched (see _watch)?
            local.mode = ops.watch_mode()
        mode = getattr(local, "mode", 0)
        if mode != 2:  # the op callbacks are on: they attribute ops to the layers
            ops.push_layer_id(info.lid)
        # a watched step checks the outputs of the root and of modules holding others
        stack.append(_watch.Frame(info, mode != 2, mode != 0 and (info.parent or not stack)))

    def _post(self, module, args, *kwargs_output):
        # (kwargs, output); torch calls always_call hooks as (module, args, output) when the
        # forward raised
        kwargs, output = kwargs_output if len(kwargs_output) == 2 else ({}, kwargs_output[0])
        if torch.compiler.is_compiling():
            return
        stack = self._stack()
        frame = stack.pop() if stack else None
        if frame is not None:
            if frame.watched:  # a watched step: no op inside this module was checked
                target = self._unwrap_compiled(module) if frame.info.compiled else module
                _watch.check_output(self._local, target, args, kwargs, output, frame, stack)
            if not stack:
                _watch.blame_model_inputs(frame, args, kwargs)
            if frame.pushed and _core.ops().pop_layer():
                # some live tensor holds NaN/Inf an op made: does this module pass it on?
                leaves = _watch.tensor_leaves(output)
                if leaves:
                    _core.ops().module_outputs(leaves)
        if self._stop is not None:
            self.check_stop()

    def check_stop(self):
        """Raises the stop exception once an op has produced a NaN/Inf (stop_on_nonfinite)."""
        if self._stop is not None and _core.ops().nonfinite_seen():
            stop, self._stop = self._stop, None  # raise once; later hooks stay quiet
            raise stop()

    def _unwrap_compiled(self, module):
        """torch.compile's wrapper stands for the module it compiled (named as the user's)."""
        orig = module._modules.get("_orig_mod")
        if isinstance(orig, torch.nn.Module) and self._is_compiled(module):
            if type(orig).__name__ not in self.compiled:
                self.compiled.append(type(orig).__name__)
            return orig
        return module

    @staticmethod
    def _is_compiled(module):
        dynamo = getattr(getattr(torch, "_dynamo", None), "eval_frame", None)
        optimized = getattr(dynamo, "OptimizedModule", None)
        return optimized is not None and isinstance(module, optimized)

    def install(self):
        # torch warns, at every torch.compile(module), that global module hooks fire once more
        # for the OptimizedModule wrapper: these hooks take the wrapper for the module it wraps
        warnings.filterwarnings("ignore", message=_COMPILE_HOOKS_WARNING, category=UserWarning)
        self._handles.append(register_module_forward_pre_hook(self._pre))
        self._handles.append(register_module_forward_hook(self._post, with_kwargs=True,
                                                          always_call=True))
        self._handles.append(register_optimizer_step_pre_hook(self._before_optimizer_step))
        self._handles.append(register_optimizer_step_post_hook(self._after_optimizer_step))

    def _before_optimizer_step(self, optimizer, args, kwargs):
        # the optimizer runs: a GradScaler that found inf would have skipped it, so non-finite
        # gradients of this step are harmful now
        self._record_sharded_grads(optimizer)
        _core.ops().optimizer_step_begins()
        self.check_stop()
        _updates.before_step(self._owners, optimizer)  # updates lost to rounding
        _core.ops().push_phase("optimizer")

    def _record_sharded_grads(self, optimizer):
        """The local shards of this optimizer's DTensor gradients (each parameter belongs to
        one optimizer, so each is recorded once per step)."""
        if not self._sharded:
            return
        mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
        for ref, full, layer, layer_type in self._sharded:
            param = ref()
            grad = getattr(param, "grad", None)
            if param is None or grad is None or id(param) not in mine:
                continue
            local = getattr(grad, "_local_tensor", grad)  # DTensor: this rank's shard
            _core.ops().param_grad(full, layer, layer_type, local)

    def _after_optimizer_step(self, optimizer, args, kwargs):
        _core.ops().pop_phase()
        _updates.after_step()
        # one training step per step of the first optimizer that steps (several optimizers
        # must not multiply run.steps); none once the script calls ampscope.step()
        if self._manual_steps:
            return
        if self._step_owner is None or self._step_owner() is None:
            self._step_owner = weakref.ref(optimizer)
        if self._step_owner() is optimizer:
            self._optimizer_marked = True
            _core.ops().mark_step()

    def user_step(self):
        """ampscope.step(): from now on the script marks steps. A step its optimizer already
        ended is not ended twice."""
        self._manual_steps = True
        already, self._optimizer_marked = self._optimizer_marked, False
        if not already:
            _core.ops().mark_step()

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        warnings.filters[:] = [f for f in warnings.filters
                               if not (f[0] == "ignore" and getattr(f[1], "pattern", None)
                                       == _COMPILE_HOOKS_WARNING)]
        _core.ops().unhook_params()
