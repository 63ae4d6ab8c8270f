"""Updates lost to rounding: before an optimizer step on a recorded step, the attached parameters
(and their float16/bfloat16 optimizer state) go to the core, which copies the low-precision ones
and compares them after the step (torch.ops.ampscope.updates_before/after). Parameter groups
with a zero learning rate are frozen on purpose and not watched."""
import torch

from . import _core


def _frozen(group):
    lr = group.get("lr", None)
    if isinstance(lr, torch.Tensor):
        return lr.numel() == 1 and float(lr) == 0.0
    return lr == 0


def _low_precision(t):
    return isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)


def _entries(owners, optimizer):
    """(name, layer, type, role, tensor, grad) of every attached parameter the optimizer holds
    (its values give representability), and of its low-precision state tensors shaped like it.
    A tensor is compared after the step only where an update was due: an empty grad says none."""
    none = torch.empty(0)
    for group in optimizer.param_groups:
        frozen = _frozen(group)
        for p in group["params"]:
            owner = owners.get(id(p))
            if owner is None:
                continue
            due = p.grad is not None and not p.grad.is_sparse and not frozen
            grad = p.grad if due else none
            yield (*owner, "value", p, grad)
            if not due:
                continue
            for role, s in optimizer.state.get(p, {}).items():
                if _low_precision(s) and s.shape == p.shape:
                    yield (*owner, str(role), s, grad)


def before_step(owners, optimizer):
    """Hands this step's watched tensors to the core (recorded steps only)."""
    ops = _core.ops()
    if not ops.sampling_now():
        return
    rows = list(_entries(owners, optimizer))
    if not rows:
        ops.updates_before([], [], [], [], [], [])
        return
    names, layers, types, roles, tensors, grads = (list(c) for c in zip(*rows))
    ops.updates_before(names, layers, types, roles, tensors, grads)


def after_step():
    _core.ops().updates_after()
