"""The watch of unsampled steps (ObserverOptions::watch_unsampled in the core).

A step that carries no stats is not observed op by op: the op callbacks are off (with a
GradScaler, on from its unscale to its update, to see the update), the module hooks check the
outputs of the root and of every module holding others for NaN/Inf (a leaf's values reach its
parent's output), and the core's C++ gradient hooks check parameter gradients. A module whose output went non-finite is replayed:
its forward runs again on copies of its inputs and buffers, from the RNG state it started with,
under the per-op sentinel, which names the op at this step and layer exactly as an observed step
would. The training run never sees the replay: the originals keep their values and versions and
the RNG state is put back."""
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
    if parent is not None and ops.any_nonfinite(tensor_leaves((args, kwargs))):
        parent.child_trip = True  # made before this module: the enclosing one's own ops
        return
    replay(local, module, args, kwargs, frame, leaves)


def replay(local, module, args, kwargs, frame, leaves):
    """Runs module.forward again under the per-op sentinel (see the module doc). Copies, not the
    originals: a forward may write its inputs or buffers in place (an in-place ReLU, BatchNorm's
    running stats), and autograd may have saved them."""
    ops = _core.ops()
    generator = torch.default_generator
    after = generator.get_state()
    copy = lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t  # noqa: E731
    args, kwargs = _pytree.tree_map(copy, (args, kwargs))
    swapped = [(m, name, b) for m in module.modules() for name, b in m._buffers.items()
               if b is not None]
    mode, local.mode = getattr(local, "mode", 0), 0  # the modules it calls push their layers
    failed = None
    ops.begin_replay()
    if not frame.pushed:
        ops.push_layer_id(frame.info.lid)
    try:
        for m, name, b in swapped:
            m._buffers[name] = b.detach().clone()
        generator.set_state(frame.rng)
        replayed = tensor_leaves(module.forward(*args, **kwargs))
        if replayed:
            ops.module_outputs(replayed)  # the values the replay's ops made reach its output
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
    if not ops.nonfinite_seen():
        why = f"the replay failed: {type(failed).__name__}" if failed else "not reproduced by a replay"
        ops.note_unattributed(frame.info.name, frame.info.type, f"{frame.info.type} output ({why})",
                              "forward", None, any(bool(torch.isnan(t).any()) for t in leaves), -1)
