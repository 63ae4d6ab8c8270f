"""What a run records, from Python (issue 7): every-N sampling, layer and op filters, input
stats, and run.sampling in the report. Oracle: the calls the test itself makes, and torch's own
reductions of the tensors involved."""
import json

import pytest
import torch

import ampscope


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        self.dec = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.dec(self.enc(x))


def train(model, steps):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(16, 8)
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()


def calls(report, layer, phase="forward"):
    return sum(o["calls"] for l in report["layers"] if l["name"] == layer for o in l["ops"]
               if o["phase"] == phase)


def test_every_n_records_the_sampled_steps_only():
    torch.manual_seed(0)
    full, sampled = Net(), Net()
    with ampscope.profile(model=full, out=None) as p_full:
        train(full, 6)
    with ampscope.profile(model=sampled, out=None, every=3) as p_sampled:
        train(sampled, 6)
    # Steps 0 and 3 of 6: a third of the calls, in every layer and phase.
    for layer in ("enc.0", "enc.1", "dec"):
        for phase in ("forward", "backward"):
            assert 3 * calls(p_sampled.report, layer, phase) == calls(p_full.report, layer, phase)
    assert p_sampled.report["run"]["sampling"]["every"] == 3
    assert p_sampled.report["run"]["steps"] == 6


def test_include_and_exclude_layers():
    model = Net()
    with ampscope.profile(model=model, out=None, include="enc", exclude=["enc.1"]) as p:
        train(model, 1)
    r = p.report
    assert calls(r, "enc.0") > 0 and calls(r, "enc.0", "backward") > 0
    assert calls(r, "enc.1") == 0 and calls(r, "dec") == 0 and calls(r, "dec", "backward") == 0
    s = r["run"]["sampling"]
    assert s["include_layers"] == ["enc"] and s["exclude_layers"] == ["enc.1"]


def test_op_filter():
    model = Net()
    with ampscope.profile(model=model, out=None, ops="aten::linear,*Backward0") as p:
        train(model, 1)
    names = {o["op"] for l in p.report["layers"] for o in l["ops"]}
    assert "aten::linear" in names and "AddmmBackward0" in names
    assert all(n == "aten::linear" or n.endswith("Backward0") for n in names), names


def test_input_stats_match_torch():
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(16, 8) * 3e4  # some values past float16's max
    x[0, 0] = float("nan")
    with ampscope.profile(model=lin, out=None, input_stats=True) as p:
        with torch.no_grad():
            lin(x)
    (op,) = [o for l in p.report["layers"] if l["name"] == "" for o in l["ops"]
             if o["op"] == "aten::linear"]
    ins = op["input_stats"]
    tensors = [x, lin.weight.detach(), lin.bias.detach()]
    assert ins["count"] == sum(t.numel() for t in tensors)
    assert ins["nan"] == 1
    assert ins["overflow"]["float16"] == sum(int(torch.isinf(t.half()).sum()) for t in tensors)
    assert p.report["run"]["sampling"]["stats_on"] == "inputs_and_outputs"


def test_cli_flags_reach_the_report(tmp_path, run_py):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(4):\n"
        "    opt.zero_grad(); m(torch.randn(3, 4)).sum().backward(); opt.step()\n")
    out = tmp_path / "out"
    r = run_py("-m", "ampscope", "--out", out, "--every", "2", "--include", "0,2",
               "--exclude-ops", "aten::relu", "--input-stats", script)
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    s = rep["run"]["sampling"]
    assert (s["every"], s["include_layers"], s["exclude_ops"], s["stats_on"]) == (
        2, ["0", "2"], ["aten::relu"], "inputs_and_outputs")
    assert calls(rep, "1") == 0
    assert calls(rep, "0") == 2  # one linear on steps 0 and 2


def test_bad_pattern_type_is_a_clear_error():
    with pytest.raises(TypeError, match="include"):
        ampscope.profile(out=None, include=3)
