"""What the observer needs of nested calls (issue 14): a recorded step sees top-level calls and
their direct nested calls (autocast's inner call and casts); deeper ones are not handed to
RecordFunction while only ampscope listens. Oracles: torch.profiler's own event list (another
tool still sees every nested call) and the autograd graph (nodes created deep inside a call still
land in its layer)."""
import collections

import torch
from torch import nn

import ampscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def step(model, x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()


def profiled_event_names(with_ampscope):
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 16)
    step(model, x)  # warm up
    from torch.profiler import ProfilerActivity, profile
    ctx = ampscope.profile(model=model, out=None) if with_ampscope else None
    if ctx:
        ctx.__enter__()
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step(model, x)
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    return collections.Counter(e.name for e in prof.events() if e.name.startswith("aten::"))


def test_another_profiler_still_sees_every_nested_call():
    alone = profiled_event_names(False)
    beside = profiled_event_names(True)
    # autocast's casts run _to_copy/empty_strided/copy_ inside aten::to: nested two deep
    assert alone["aten::_to_copy"] > 0 and alone["aten::copy_"] > 0
    assert {k: v for k, v in beside.items() if not k.startswith("aten::ampscope")} == alone


def test_nodes_made_deep_inside_a_call_land_in_its_layer():
    torch.manual_seed(0)
    model, x = Net(), torch.randn(8, 16)
    with ampscope.profile(model=model, out=None) as prof:
        step(model, x)
    layers = {l["name"]: {o["op"] for o in l["ops"] if o["phase"] == "backward"}
              for l in prof.report["layers"]}
    for name in ("a", "b"):
        # under bfloat16 autocast F.linear runs addmm inside autocast's inner linear (two deep);
        # its node and the weight's cast node are this layer's
        assert "AddmmBackward0" in layers[name], layers
        assert "ToCopyBackward0" in layers[name], layers
    assert "AddmmBackward0" not in layers.get("<outside>", set())
