"""Tensors without memory of their own (wrapper subclasses, DTensor, FakeTensor, torch.func
levels, functionalization, meta, nested, sparse, quantized, complex) through every observation
path: never a crash or a torch internal error, skipped reads counted in run.notes, and plain
tensors beside them still measured exactly. Oracle: torch's own values of the same ops."""
import json
import textwrap

import pytest
import torch

import ampscope
from conftest import TEARDOWN_ABORT

# Every kind, made in a child process (DTensor needs a process group), each driven through:
# an out-of-place op and an in-place op (the in-place input check), --input-stats, --shadow
# (the FP32 re-run), the sentinel of unsampled steps (every=2), and module hooks.
KINDS_SCRIPT = r"""
import json, sys, torch, ampscope
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch._subclasses.fake_tensor import FakeTensorMode

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
from torch.distributed.tensor import DTensor, Shard, distribute_tensor, init_device_mesh
mesh = init_device_mesh("cpu", (1,))


class Wrapper(torch.Tensor):
    # a __torch_dispatch__ wrapper subclass with no storage of its own
    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

    def __init__(self, inner):
        self.inner = inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda x: x.inner if isinstance(x, Wrapper) else x
        out = func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})
        return Wrapper(out) if isinstance(out, torch.Tensor) else out


def make(kind):
    base = torch.randn(4, 4)
    if kind == "dtensor": return distribute_tensor(base, mesh, [Shard(0)])
    if kind == "wrapper": return Wrapper(base)
    if kind == "fake": return FakeTensorMode(allow_non_fake_inputs=True).from_tensor(base)
    if kind == "meta": return base.to("meta")
    if kind == "nested": return torch.nested.nested_tensor([torch.randn(2, 4), torch.randn(3, 4)])
    if kind == "sparse": return base.to_sparse()
    if kind == "complex": return torch.randn(4, 4, dtype=torch.complex64)
    if kind == "quantized": return torch.quantize_per_tensor(base, 0.1, 0, torch.qint8)
    raise ValueError(kind)


def ops_on(kind, x):
    if kind == "quantized":
        return [torch.ops.quantized.add(x, x, 0.1, 0)]
    if kind == "sparse":
        y = x * 2.0
        return [y, y.add_(x)]
    y = x * 2.0
    y.add_(1.0)
    return [y, torch.relu(y)] if kind != "complex" else [y]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = torch.nn.Linear(4, 4)

    def forward(self, kind, x):
        return self.plain(torch.ones(2, 4)), ops_on(kind, x)


kind = sys.argv[1]
results = {}
for mode in ("plain", "input_stats", "shadow", "every2"):
    model = Net()
    x = make(kind)
    opts = dict(out=None, model=model, input_stats=mode == "input_stats", shadow=mode == "shadow",
                every=2 if mode == "every2" else 1)
    with ampscope.profile(**opts) as prof:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "shadow"):
                plain_out, _ = model(kind, x)
            ampscope.step()
    expected = model.plain(torch.ones(2, 4)).abs().max().item()
    results[mode] = {"notes": prof.report["run"]["notes"], "layers": prof.report["layers"],
                     "expected_absmax": expected}
try:
    ampscope.tensor_stats(make(kind))
    results["tensor_stats"] = "no error"
except Exception as e:
    results["tensor_stats"] = type(e).__name__ + ": " + str(e)
print("RESULT " + json.dumps(results))
dist.barrier()  # no rank tears gloo down while another still has work in flight
dist.destroy_process_group()
"""

ODD_OPS = {"aten::mul", "aten::add_", "aten::relu", "quantized::add"}
KINDS = ["dtensor", "wrapper", "fake", "meta", "nested", "sparse", "complex", "quantized"]


@pytest.fixture(scope="module")
def kinds_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("kinds") / "kinds.py"
    path.write_text(KINDS_SCRIPT)
    return path


def run_kind(run_py, script, kind):
    res = run_py(script, kind, timeout=240)
    if res.returncode != 0 and TEARDOWN_ABORT in res.stderr:
        res = run_py(script, kind, timeout=240)  # torch's gloo teardown, now and then (conftest)
    assert res.returncode == 0, res.stderr[-3000:]
    line = [l for l in res.stdout.splitlines() if l.startswith("RESULT ")]
    assert line, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(line[0][len("RESULT "):])


def forward_ops(layers, name):
    return {o["op"]: o for l in layers if l["name"] == name for o in l["ops"] if o["phase"] == "forward"}


@pytest.mark.parametrize("kind", KINDS)
def test_every_path_skips_what_has_no_storage(run_py, kinds_script, kind):
    r = run_kind(run_py, kinds_script, kind)
    for mode in ("plain", "input_stats", "shadow", "every2"):
        got = r[mode]
        # the plain layer beside the odd tensors is measured exactly (oracle: torch's result)
        linear = forward_ops(got["layers"], "plain").get("aten::linear")
        assert linear is not None and linear["calls"] == (1 if mode == "every2" else 2), mode
        assert linear["stats"]["count"] == 8 * linear["calls"], mode
        if mode != "shadow":
            assert linear["stats"]["absmax"] == pytest.approx(got["expected_absmax"], rel=0, abs=0)
        # the odd tensors' ops are counted, never read
        root = {k: o for k, o in forward_ops(got["layers"], "").items() if k in ODD_OPS}
        # (FakeTensorMode runs meta kernels in place of the op: those are what is seen)
        assert kind == "fake" or any(o["calls"] > 0 for o in root.values()), (mode, list(root))
        for o in root.values():
            if kind in ("dtensor", "wrapper"):
                continue  # the inner ops on the wrapped tensors are real, readable ops
            assert o["stats"]["count"] == 0, (mode, o["op"], o["stats"])
    notes = " ".join(r["plain"]["notes"])
    if kind in ("dtensor", "wrapper"):
        # torch re-runs the op on the wrapped tensor: that op is recorded, with its stats
        mul = forward_ops(r["plain"]["layers"], "").get("aten::mul")
        assert mul is not None and mul["stats"]["count"] == 16 * mul["calls"], r["plain"]["layers"]
    else:
        assert "tensor reads skipped" in notes, notes
    msg = r["tensor_stats"]
    assert msg.startswith("ValueError: ampscope::tensor_stats: cannot read"), msg
    assert "internal error" not in msg.lower()


def test_plain_tensor_stats_still_exact():
    t = torch.tensor([1.0, -70000.0, float("nan"), 0.0])
    s = ampscope.tensor_stats(t)
    assert (s["count"], s["nan"], s["zeros"], s["absmax"]) == (4, 1, 1, 70000.0)
    assert s["overflow"]["float16"] == int(torch.isinf(t.half()).sum())
    assert ampscope.tensor_stats(torch.arange(3))["count"] == 0  # integers: no stats, no error
