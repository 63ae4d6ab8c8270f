"""The watch of unsampled steps (ObserverOptions::watch_unsampled in the core).

A step that carries no stats is not observed op by op: the op callbacks are off (with a
GradScaler, on from its unscale to its update, to see the update), the module hooks check the
outputs of the root and of every module holding others for NaN/Inf (a leaf's values reach its
parent's output), and the core's C++ gradient hooks check parameter gradients. A module whose output went non-finite is replayed:
its forward runs again on copies of its inputs and buffers, from the RNG state it started with,
under the per-op sentinel, which names the op at this step and layer exactly as an observed step
would. The training run never sees the replay: the originals keep their values and versions and
the RNG state is put back."""
import copy

import torch
from torch.utils import _pytree

from . import _core


def tensor_leaves(value):
    """The tensors in a module's output or inputs (nested tuples, lists, dicts, ModelOutputs)."""
    leaves = [t for t in _pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]
    if not leaves and isinstance(value, dict):
        leaves = [t for t in value.values() if isinstance(t, torch.Tensor)]
    return leaves


class Frame:
    """A module call on its thread's stack: its layer (`info`), whether its layer was pushed
    to the core, whether its output is checked (then the CPU RNG state it started with is kept
    for a replay), and whether a module it called got non-finite values from outside itself
    (made by this one's own ops)."""
    __slots__ = ("info", "pushed", "watched", "rng", "child_trip")

    def __init__(self, info, pushed, watched):
        self.info = info
        self.pushed = pushed
        self.watched = watched
        self.rng = torch.default_generator.get_state() if watched else None
        self.child_trip = False


def check_output(local, module, args, kwargs, output, frame, stack):
    """After a watched module call: its output (or a child's) went non-finite -> find out why."""
    ops = _core.ops()
    leaves = tensor_leaves(output)
    if not (frame.child_trip or ops.any_nonfinite(leaves)) or ops.nonfinite_seen():
        return  # clean, or the run's first harmful origin is known already
    parent = next((f for f in reversed(stack) if f is not None), None)
    inputs = tensor_leaves((args, kwargs))
    if ops.any_nonfinite(inputs):
        if parent is not None:
            parent.child_trip = True  # made before this module: the enclosing one's own ops
        else:  # handed to the outermost module: made outside every module (the data)
            ops.note_unattributed("", "", model_inputs_text(frame.info.type), "forward", None,
                                  any_nan(inputs), -1, False)
        return
    replay(local, module, args, kwargs, frame, leaves)


def any_nan(tensors):
    """True when a floating tensor among them holds a NaN (the kind of a non-finite record)."""
    return any(bool(torch.isnan(t).any()) for t in tensors if t.is_floating_point())


def model_inputs_text(module_type):
    """The op of an origin in the model's own inputs (made outside every module: the data)."""
    return f"inputs of {module_type} (non-finite from outside every module)"


def blame_model_inputs(frame, args, kwargs):
    """After the outermost module's call on the step the run first went non-finite: an op that
    was handed NaN/Inf of unknown source got them from the model's inputs when those hold
    them (a batch from the data loader), so the origin is the data's, not that op's module."""
    ops = _core.ops()
    if ops.nonfinite_seen():
        ops.blame_model_inputs(tensor_leaves((args, kwargs)), model_inputs_text(frame.info.type))


def replay_copy(value, memo=None, depth=0):
    """A copy of a forward's argument for a replay: tensors cloned (detached), containers and
    plain objects copied with their attributes (a key/value cache that the forward appends to,
    such as Hugging Face's DynamicCache, must not grow twice), modules, functions and anything
    without attributes kept as they are."""
    memo = {} if memo is None else memo
    if id(value) in memo:
        return memo[id(value)]
    if isinstance(value, torch.Tensor):
        out = value.detach().clone()
    elif depth > 8 or isinstance(value, (torch.nn.Module, type)) or callable(value):
        out = value
    elif isinstance(value, (list, tuple)):
        items = [replay_copy(v, memo, depth + 1) for v in value]
        out = type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    elif isinstance(value, dict):
        out = copy.copy(value)  # keeps the dict's own type (ModelOutput, OrderedDict)
        for k, v in value.items():
            out[k] = replay_copy(v, memo, depth + 1)
    elif state_object(value):
        out = copy.copy(value)
        memo[id(value)] = out
        for k, v in vars(value).items():
            vars(out)[k] = replay_copy(v, memo, depth + 1)
    else:
        out = value
    memo[id(value)] = out
    return out


def state_object(value):
    """A plain object with attributes a forward may update (a key/value cache): not a tensor,
    container, module, class or callable."""
    return (hasattr(value, "__dict__") and not callable(value)
            and not isinstance(value, (torch.Tensor, torch.nn.Module, type, list, tuple, dict)))


def without_state_objects(args, kwargs):
    """The arguments with state objects replaced by None; None when there are none."""
    def strip(v):
        return None if state_object(v) else v
    new_args, new_kwargs = [strip(a) for a in args], {k: strip(v) for k, v in kwargs.items()}
    same = all(a is b for a, b in zip(new_args, args)) and all(
        new_kwargs[k] is v for k, v in kwargs.items())
    return None if same else (tuple(new_args), new_kwargs)


def replay(local, module, args, kwargs, frame, leaves):
    """Runs module.forward again under the per-op sentinel (see the module doc). Copies, not the
    originals: a forward may write its inputs or buffers in place (an in-place ReLU, BatchNorm's
    running stats), and autograd may have saved them."""
    ops = _core.ops()
    generator = torch.default_generator
    after = generator.get_state()
    try:
        args, kwargs = replay_copy((args, kwargs))
    except Exception:  # an argument that cannot be copied: tensors only, as before
        clone = lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t  # noqa: E731
        args, kwargs = _pytree.tree_map(clone, (args, kwargs))
    swapped = [(m, name, b) for m in module.modules() for name, b in m._buffers.items()
               if b is not None]
    mode, local.mode = getattr(local, "mode", 0), 0  # the modules it calls push their layers
    failed = None
    ops.begin_replay()
    if not frame.pushed:
        ops.push_layer_id(frame.info.lid)
    def run(args, kwargs):
        for m, name, b in swapped:
            m._buffers[name] = b.detach().clone()
        generator.set_state(frame.rng)
        # No graph: the replay's values are read, never differentiated, and nothing it computes
        # may be saved for backward. Inside a non-reentrant checkpoint, saved tensors go through
        # the checkpoint's hooks, which count them: the replay's made the user's backward raise
        # CheckpointError ("a different number of tensors was saved").
        with torch.no_grad():
            replayed = tensor_leaves(module.forward(*args, **kwargs))
        if replayed:
            ops.module_outputs(replayed)  # the values the replay's ops made reach its output

    try:
        try:
            run(args, kwargs)
        except Exception:
            # A state object the call already updated (a key/value cache holds this call's keys
            # now): once more without such objects, which optional arguments accept.
            stripped = without_state_objects(args, kwargs)
            if stripped is None or ops.nonfinite_seen():
                raise
            run(*stripped)
    except Exception as e:  # never disturb the training loop
        failed = e
    finally:
        if not frame.pushed:
            ops.pop_layer()
        ops.end_replay()
        local.mode = mode
        generator.set_state(after)
        for m, name, b in swapped:
            m._buffers[name] = b
    from . import NonFiniteStop
    if isinstance(failed, NonFiniteStop):
        raise failed  # stop_on_nonfinite: a module inside the replay saw the origin named
    if not ops.nonfinite_seen():
        why = f"the replay failed: {type(failed).__name__}" if failed else "not reproduced by a replay"
        ops.note_unattributed(frame.info.name, frame.info.type, f"{frame.info.type} output ({why})",
                              "forward", None, any_nan(leaves), -1)
