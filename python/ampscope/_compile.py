"""torch.compile'd models observed per layer.

While a profile is active, an inductor post-grad custom pass (torch._inductor.config.
post_grad_custom_post_pass, run on the forward and on the backward graph after inductor's own
pattern rewrites) inserts torch.ops.ampscope.observe after the nodes that matter: matmuls and
convolutions, reductions (norms, softmax), narrowing casts, and every value that leaves its
module. Each point hands the node's value to the core, which records it as one call of the
node's op (e.g. aten::addmm) in the layer named by the node's nn_module_stack (forward) or the
fwd_nn_module_stack AOTAutograd copies onto backward nodes, through the same path as eager ops.
"""
import hashlib
import math
import operator
import re

import torch

from . import _core
from . import _compile_region, _compile_scope
from ._compile_region import program
from ._compile_scope import Scopes, root_source

_MATMUL = {"mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention_for_cpu",
           "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
           "_scaled_mm", "_int_mm"}
_REDUCTION = {"sum", "mean", "amax", "amin", "var_mean", "var", "prod", "logsumexp"}
_LOW = (torch.float16, torch.bfloat16)
_MAX_DEPS = 4
_AUTOCAST = {"none": 0, "lower_precision": 1, "fp32": 2}


def _op_name(node):
    """aten::addmm for aten.addmm.default; None for getitem and non-op targets."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        ns, name = target.namespace, target._schema.name.split("::")[-1]
        return f"{ns}::{name}"
    return None


def layer_name(path):
    """The qualified module name in a dynamo nn_module_stack path: "L['self'].h[0].attn" ->
    "h.0.attn" (the compiled module itself is ""; a forward wrapped by a `*args` decorator, as
    transformers 5 does, names it "L['args'][0]")."""
    path = re.sub(r"^[LG]\['args'\]\[0\]|^[LG]\['[^']*'\]", "", path)
    path = re.sub(r"getattr\((.*?), '([^']*)'\)", r"\1.\2", path)
    path = re.sub(r"\[(\d+)\]|\['([^']*)'\]", lambda m: "." + (m.group(1) or m.group(2)), path)
    path = path.replace("._modules.", ".")
    parts = path.strip(".").split(".") if path.strip(".") else []
    while parts and parts[0] == "_orig_mod":  # an OptimizedModule's own wrapper level
        parts.pop(0)
    return ".".join(parts)


def _layer(node, backward):
    """(module path as dynamo wrote it, layer type) of the node's innermost module."""
    stack = node.meta.get("fwd_nn_module_stack" if backward else "nn_module_stack")
    if not stack:
        return None
    path, cls = list(stack.values())[-1]
    return path, getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1].strip("'>"))


def qualified(path, scopes, prefix):
    """The layer a node's module path names: under the module its root source resolved to
    (see _compile_scope), else under the compiled module's name (`prefix`)."""
    root = root_source(path)
    scope = scopes.get(root) if root is not None else None
    if scope is not None:
        return ".".join(p for p in (scope, layer_name(path[len(root):])) if p)
    return ".".join(p for p in (prefix, layer_name(path)) if p)


def _value(node):
    val = node.meta.get("val")
    return val if isinstance(val, torch.Tensor) and val.is_floating_point() else None


# ops between autocast's cast and the matmul that only lay the values out (the cast of a
# Linear's input is viewed to 2-d, its weight's permuted)
_LAYOUT = {"aten::view", "aten::_unsafe_view", "aten::reshape", "aten::permute", "aten::t",
           "aten::transpose", "aten::expand", "aten::unsqueeze", "aten::squeeze", "aten::clone",
           "aten::contiguous", "aten::alias"}


def _written_dtype(node):
    """The widest floating dtype of the node's tensor inputs as the model wrote them: through
    the casts autocast put in front of the node (and the views between them and it)."""
    widest = None
    for arg in node.all_input_nodes:
        src = arg
        while src.op == "call_function" and src.args and isinstance(src.args[0], torch.fx.Node) \
                and _op_name(src) in _LAYOUT | {"prims::convert_element_type"}:
            src = src.args[0]
        val = _value(src)
        if val is not None:
            widest = val.dtype if widest is None else torch.promote_types(widest, val.dtype)
    return widest


def _autocast_class(written, computed):
    if written is None or computed is None or written == computed:
        return "none"
    if computed in _LOW and written.itemsize > computed.itemsize:
        return "lower_precision"
    if computed == torch.float32 and written in _LOW:
        return "fp32"
    return "none"


def _kind(node):
    """Why a node is observed ("matmul", "reduction", "cast") or None."""
    name = _op_name(node)
    if name is None:
        if node.target is operator.getitem and node.args and _op_name(node.args[0]) == "aten::var_mean":
            return "reduction" if node.args[1] == 0 else None
        return None
    short = name.split("::")[-1]
    if short in _MATMUL:
        return "matmul"
    if short in _REDUCTION:
        return "reduction"
    if name == "prims::convert_element_type":
        src = _value(node.args[0])
        out = _value(node)
        if src is not None and out is not None and out.dtype.itemsize < src.dtype.itemsize:
            return "cast"  # narrowing: values can overflow or underflow here
    return None


def _leaves_module(node, layer, layers):
    """True when the node's value is its module's output: some user runs in an enclosing
    module (a prefix of the node's layer; the model's own forward, whose nodes carry no module
    stack, is the root) or is the graph's output. A user in a sibling module does not count:
    it is a value the graph shares across modules (a causal mask made once, in the first
    layer's scope, and read by every layer), which eager code hands down from the parent."""
    if not layer:
        return any(user.op == "output" for user in node.users)
    for user in node.users:
        if user.op == "output":
            return True
        other = layers.get(user, "")
        if other != layer and (not other or layer.startswith(other + ".")):
            return True
    return False


_FILL_OPS = {"aten::full", "aten::scalar_tensor", "aten::full_like", "aten::new_full"}


def _nonfinite_constant(node):
    """True for a node that writes a NaN/inf literal (where(mask, 0, -inf), full(-inf)): a mask
    the model or a decomposed attention builds, which eager sees as its op's constant. Such a
    value also leaves as a tensor saved for backward, which is no module output."""
    def nonfinite(a):
        return isinstance(a, float) and not math.isfinite(a)

    def constant(a):  # full([], -inf), scalar_tensor(-inf): the literal as a node
        return (isinstance(a, torch.fx.Node) and a.op == "call_function"
                and _op_name(a) in _FILL_OPS and any(nonfinite(x) for x in a.args))

    return any(nonfinite(a) or constant(a) for a in (*node.args, *node.kwargs.values()))


def _autocast_state():
    return ",".join(f"{d}={torch.is_autocast_enabled(d)}/{torch.get_autocast_dtype(d)}"
                    for d in ("cpu", "cuda"))


class ObservePass(torch._inductor.custom_graph_pass.CustomGraphPass):
    """The post-grad pass inserting observation points (cacheable: uuid = its code's hash)."""

    def __init__(self, prefix=lambda: "", chained=None, scopes=None):
        self.prefix = prefix      # -> name of the compiled module as the tracker knows it
        self.chained = chained    # a user's own post-grad pass, run first
        self.scopes = scopes      # a _compile_scope.Scopes: the modules the frame's paths start at
        self.graphs = 0
        self.points = 0
        self.keyed = 0    # cache keys asked for: graphs compiled or loaded from inductor's cache

    def __deepcopy__(self, memo):
        # torch.compile copies inductor's config (deepcopy) when it is called: the pass is
        # state shared with the profile (a tracker holding thread-locals), not a value
        return self

    def uuid(self):
        self.keyed += 1
        digest = hashlib.sha256()
        for path in (__file__, _compile_scope.__file__, _compile_region.__file__):  # point writers
            with open(path, "rb") as f:
                digest.update(f.read())
        digest = digest.hexdigest()
        # the layer prefix and the ambient autocast state are state the graph depends on. With
        # torch 2.11 a cached graph traced under bfloat16 autocast was reused under float16
        # (the cache key misses the ambient autocast dtype), so it is part of this key. The
        # modules the frame's locals hold name the layers, so they are part of it too.
        frame = self.scopes.frame_key() if self.scopes is not None else ""
        return f"{digest}:{self.prefix()}:{_autocast_state()}:{frame}"

    def __call__(self, graph):
        if self.chained is not None:
            self.chained(graph)
        backward = any(n.op == "placeholder" and n.name.startswith("tangents") for n in graph.nodes)
        scopes = self.scopes.current() if self.scopes is not None else {}
        points = self._select(graph, backward, scopes)
        self._insert(graph, points, backward, scopes)
        self.graphs += 1
        self.points += len(points)

    def _select(self, graph, backward, scopes):
        layers, points = {}, {}
        for node in graph.nodes:
            named = _layer(node, backward) if node.op == "call_function" else None
            if named is not None:
                layers[node] = qualified(named[0], scopes, "")
        for node, layer in layers.items():
            if _value(node) is None:
                continue
            kind = _kind(node)
            out = not backward and not _nonfinite_constant(node) and \
                _leaves_module(node, layer, layers)
            if kind or out:
                points[node] = out
        return points

    def _deps(self, node, points):
        """Nearest observed ancestors and graph inputs (floating tensors)."""
        deps, seen, todo = [], set(), list(node.all_input_nodes)
        while todo and len(deps) < _MAX_DEPS and len(seen) < 64:
            arg = todo.pop(0)
            if arg in seen:
                continue
            seen.add(arg)
            if arg in points or arg.op == "placeholder":
                if _value(arg) is not None:
                    deps.append(arg)
            elif arg.op == "call_function":
                todo.extend(arg.all_input_nodes)
        return deps

    def _insert(self, graph, points, backward, scopes):
        observe = torch.ops.ampscope.observe.default
        prefix = self.prefix()
        for node, module_output in points.items():
            path, layer_type = _layer(node, backward)
            full = qualified(path, scopes, prefix)
            op = _op_name(node) or "aten::var_mean"
            val = _value(node)
            written = _written_dtype(node) if _kind(node) == "matmul" else None
            autocast = _autocast_class(written, val.dtype)
            # a low-precision point's fused region, for the float32 re-check of a NaN/Inf it
            # makes from finite inputs: then its deps are exactly the region's inputs
            region = program(node, points) if val.dtype in _LOW else None
            code, deps = region if region is not None else ("", self._deps(node, points))
            with graph.inserting_after(node):
                point = graph.call_function(observe, (
                    node, deps, full, layer_type, op,
                    written if written is not None else val.dtype, _AUTOCAST[autocast],
                    bool(module_output), code))
            point.meta["val"] = None


def _quiet_while_compiling():
    """While dynamo and inductor compile (tracing with fake tensors, running passes) nothing is
    the model's work: RecordFunction is switched off on the compiling thread."""
    handler = getattr(torch._dynamo.callback, "callback_handler", None)
    if handler is None:
        return None

    def start(*args, **kwargs):
        torch.autograd._enable_record_function(False)

    def end(*args, **kwargs):
        torch.autograd._enable_record_function(True)

    handler.register_start_callback(start)
    handler.register_end_callback(end)
    return handler, start, end


def _remove_callbacks(callbacks):
    if callbacks is None:
        return
    handler, start, end = callbacks
    handler.remove_start_callback(start)
    handler.remove_end_callback(end)


class CompileObserver:
    """Installs the pass while a profile is active; restores the previous config after."""

    def __init__(self, prefix=lambda: "", name_of=lambda m: None, same_type=lambda m: []):
        self.prefix = prefix
        self.scopes = Scopes(name_of, same_type)
        self.pass_ = None
        self._previous = None

    def install(self):
        if self.pass_ is not None:
            return
        _core.ops()  # the library defines torch.ops.ampscope.observe
        torch.fx.node.has_side_effect(torch.ops.ampscope.observe.default)
        config = torch._inductor.config
        self._previous = config.post_grad_custom_post_pass
        self.pass_ = ObservePass(self.prefix, chained=self._previous, scopes=self.scopes)
        config.post_grad_custom_post_pass = self.pass_
        self._callbacks = _quiet_while_compiling()

    def remove(self):
        if self.pass_ is None:
            return
        torch._inductor.config.post_grad_custom_post_pass = self._previous
        self._previous = None
        _remove_callbacks(self._callbacks)
        self._callbacks = None

    @staticmethod
    def _shared_note(type_name, names):
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        return (f"graphs compiled after a graph break inside {type_name}'s forward serve every "
                f"{type_name} alike ({shown}): the layers inside them are named "
                "relative to the module (e.g. 'wo', not 'layers.0.wo'), which a precision map "
                "cannot pin. Run the fix loop on the eager model, or remove the graph break")

    def notes(self, compiled_names):
        """run.notes lines for the compiled modules seen."""
        graphs = self.pass_.graphs if self.pass_ is not None else 0
        points = self.pass_.points if self.pass_ is not None else 0
        keyed = self.pass_.keyed if self.pass_ is not None else 0
        notes = [self._shared_note(*entry) for entry in self.scopes.shared]
        for name in compiled_names:
            if graphs == 0 and keyed == 0:
                notes.append(f"{name} runs through torch.compile, but no graph was compiled by "
                             "inductor while ampscope was active (another backend, or compiled "
                             "before profiling started): its fused kernels are not observed op "
                             "by op")
            else:
                where = (f"{points} points in {graphs} graphs compiled now" if graphs
                         else "graphs loaded from inductor's cache")
                notes.append(
                    f"{name} runs through torch.compile: observed at points inserted into its "
                    f"graphs ({where}; matmuls, reductions, narrowing casts, module outputs; op "
                    "names are the graph's aten ops). Observed values are materialised, so an "
                    "observed compiled run can round differently from an unobserved one "
                    "(identical on tests/python/test_compile.py's stack; HF GPT-2 bfloat16: "
                    "step-0 loss 4.865361 vs 4.865324; see README, Compiled models)")
        return notes
