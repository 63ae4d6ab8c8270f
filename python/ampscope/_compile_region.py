"""What a compiled point's float32 re-check re-runs: its region.

An eager op that makes NaN/Inf from finite inputs is re-run in float32 by the core, which tells
a precision problem (float32 is finite: pin the layer) from a model bug (float32 is not: fix
the model). A compiled point's value comes out of fused code: the ops between the nearest
observed values (or graph inputs) and the point. Those ops are written here as a small program
of ATen calls the core can run through the dispatcher when a point makes NaN/Inf from finite
inputs; the region's inputs are then exactly the point's `deps`.

Program text, one call per line: `ns::name.overload ARG ...` with every schema argument given
in order (defaults filled in), then `out REF`. ARG is `tK` (value K: the inputs first, then
each call's result), `tK.J` (element J of a multi-output result), `iN`, `fX` (also `finf`,
`f-inf`, `fnan`), `b0`/`b1`, `n` (None), `dN` (a dtype: c10::ScalarType number), `vDEVICE`,
`sTEXT`, or `[ARG,ARG]` (a list)."""
import operator

import torch

_MAX_CALLS = 48
_MAX_INPUTS = 8
_RANDOM = ("rand", "dropout", "seed", "bernoulli", "normal", "uniform", "multinomial",
           "randperm", "exponential", "poisson")
_DTYPE_NUMBER = {torch.float32: 6, torch.float64: 7, torch.float16: 5, torch.bfloat16: 15,
                 torch.int64: 4, torch.int32: 3, torch.int16: 2, torch.int8: 1, torch.uint8: 0,
                 torch.bool: 11, torch.float8_e4m3fn: 24, torch.float8_e5m2: 23}

_ENUM_NUMBER = {torch.strided: 0, torch.contiguous_format: 0, torch.preserve_format: 1,
                torch.channels_last: 2, torch.channels_last_3d: 3}


class _Unsupported(Exception):
    pass


def _is_tensor(node):
    return isinstance(node.meta.get("val"), torch.Tensor)


def _arguments(node):
    """The node's arguments in schema order, defaults filled in."""
    schema = node.target._schema
    out = []
    for i, arg in enumerate(schema.arguments):
        if not arg.kwarg_only and i < len(node.args):
            out.append(node.args[i])
        elif arg.name in node.kwargs:
            out.append(node.kwargs[arg.name])
        elif arg.has_default_value():
            out.append(arg.default_value)
        else:
            raise _Unsupported(arg.name)
    return out


def _token(value, ref):
    if isinstance(value, torch.fx.Node):
        return ref(value)
    if isinstance(value, bool):
        return f"b{int(value)}"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return f"f{value!r}"
    if value is None:
        return "n"
    if isinstance(value, torch.dtype):
        if value not in _DTYPE_NUMBER:
            raise _Unsupported(str(value))
        return f"d{_DTYPE_NUMBER[value]}"
    if isinstance(value, torch.device):
        return f"v{value}"
    if isinstance(value, (torch.layout, torch.memory_format)):  # c10 enums, passed as ints
        if value not in _ENUM_NUMBER:
            raise _Unsupported(str(value))
        return f"i{_ENUM_NUMBER[value]}"
    if isinstance(value, str):
        if any(c in value for c in " \n,[]"):
            raise _Unsupported(value)
        return f"s{value}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_token(v, ref) for v in value) + "]"
    raise _Unsupported(type(value).__name__)


def program(point, stops):
    """(program text, input nodes) for re-running `point` from the nodes in `stops` (observed
    points) and graph inputs, or None where the region is not a plain chain of ATen calls."""
    try:
        return _program(point, stops)
    except Exception:  # never break a compile: no re-check for this point, as before
        return None


def _program(point, stops):
    calls, inputs, todo = set(), [], [point]
    while todo:
        node = todo.pop()
        if node in calls:
            continue
        if node is not point and (node in stops or node.op == "placeholder"):
            if node not in inputs:
                if not _is_tensor(node):
                    return None
                inputs.append(node)
            continue
        if node.op != "call_function":
            return None
        if node.target is not operator.getitem:
            if not isinstance(node.target, torch._ops.OpOverload):
                return None
            if any(word in node.target._schema.name for word in _RANDOM):
                return None
        calls.add(node)
        if len(calls) > _MAX_CALLS or len(inputs) > _MAX_INPUTS:
            return None
        todo.extend(node.all_input_nodes)
    position = {node: i for i, node in enumerate(point.graph.nodes)}
    slot = {node: i for i, node in enumerate(inputs)}

    def ref(node):
        if node.target is operator.getitem and node not in slot:
            return f"t{slot[node.args[0]]}.{node.args[1]}"
        return f"t{slot[node]}"

    lines = []
    try:
        for node in sorted(calls, key=position.__getitem__):
            if node.target is operator.getitem:
                continue
            target = node.target
            name = f"{target._schema.name}.{target._overloadname}"
            lines.append(" ".join([name] + [_token(v, ref) for v in _arguments(node)]))
            slot[node] = len(slot)
        lines.append(f"out {ref(point)}")
    except (_Unsupported, KeyError, IndexError):
        return None
    return "\n".join(lines), inputs
