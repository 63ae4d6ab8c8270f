"""The Python front end on the C++ core: autocast truth, exact stats, backward attribution,
precision maps, layer names. Oracle: torch itself (its casts, its autocast results)."""
import json
import math
import warnings

import pytest
import torch

import ampscope


def layer(report, name):
    found = [l for l in report["layers"] if l["name"] == name]
    assert found, f"no layer {name!r} in {[l['name'] for l in report['layers']]}"
    return found[0]


def ops(report, name, op, phase="forward"):
    return [o for o in layer(report, name)["ops"] if o["op"] == op and o["phase"] == phase]


class Calls(torch.nn.Module):
    """Each child runs one op: from autocast's lower-precision, fp32 and promote lists, and one
    op autocast does not list."""

    class One(torch.nn.Module):
        def __init__(self, fn):
            super().__init__()
            self.fn = fn

        def forward(self, *a):
            return self.fn(*a)

    def __init__(self):
        super().__init__()
        self.lower = self.One(torch.mm)
        self.fp32 = self.One(torch.nn.functional.mse_loss)
        self.promote = self.One(lambda a, b: torch.cat([a, b]))
        self.unlisted = self.One(torch.relu)

    def forward(self, a, b):
        low = a.to(torch.bfloat16)
        return (self.lower(a, b), self.fp32(low, b.to(torch.bfloat16)), self.promote(low, b),
                self.unlisted(a))


def test_autocast_choices_are_what_torch_returns():
    model, a, b = Calls(), torch.randn(8, 8), torch.randn(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = model(a, b)  # the oracle: torch's own results, unobserved
    with ampscope.profile(model=model, out=None) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(a, b)
    r = prof.report
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
    for child, op, out in [("lower", "aten::mm", expected[0]), ("fp32", "aten::mse_loss", expected[1]),
                           ("promote", "aten::cat", expected[2]), ("unlisted", "aten::relu", expected[3])]:
        [entry] = ops(r, child, op)
        assert entry["output_dtype"] == name[out.dtype], child
        assert entry["compute_dtype"] == name[out.dtype], child
    assert ops(r, "lower", "aten::mm")[0]["autocast"] == "lower_precision"
    assert ops(r, "fp32", "aten::mse_loss")[0]["autocast"] == "fp32"
    assert ops(r, "promote", "aten::cat")[0]["autocast"] == "promote"
    assert ops(r, "unlisted", "aten::relu")[0]["autocast"] == "none"
    assert ops(r, "lower", "aten::mm")[0]["casts"] == 2
    assert r["run"]["autocast_dtype"] == "bfloat16"


EDGES = [65504.0, -65504.0, 65519.0, 65520.0, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0001,
         6e-8, 1e-40, 3.4e38, 448.0, 464.0, 465.0, 57344.0, 61440.0, float("inf"),
         float("-inf"), float("nan"), -0.0, 0.0, 1.0]


def oracle(t, fmt):
    """overflow/underflow/subnormal of `t` cast to fmt, computed with torch's own cast."""
    finite = t.isfinite()
    nonzero = finite & (t != 0)
    cast = t.to(fmt)
    tiny = torch.finfo(fmt).tiny
    return {
        "overflow": int((finite & cast.isinf()).sum()),
        "underflow": int((nonzero & (cast == 0)).sum()),
        "subnormal": int((nonzero & (cast != 0) & (cast.abs().float() < tiny)).sum()),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_tensor_stats_counts_equal_torch_casts(dtype):
    gen = torch.Generator().manual_seed(1)
    mags = torch.exp2(torch.empty(5000, dtype=torch.float64).uniform_(-30, 20, generator=gen))
    signs = torch.where(torch.rand(5000, generator=gen) < 0.5, -1.0, 1.0).double()
    t = torch.cat([mags * signs, torch.tensor(EDGES, dtype=torch.float64)]).to(dtype)
    s = ampscope.tensor_stats(t)
    assert s["count"] == t.numel()
    assert s["nan"] == int(t.isnan().sum())
    assert s["posinf"] == int((t == math.inf).sum()) and s["neginf"] == int((t == -math.inf).sum())
    assert s["zeros"] == int((t == 0).sum())
    for fmt, key in [(torch.float16, "float16"), (torch.bfloat16, "bfloat16")]:
        o = oracle(t, fmt)
        for kind in ("overflow", "underflow", "subnormal"):
            assert s[kind][key] == o[kind], (kind, key)
    finite = t[t.isfinite()].double()
    assert s["absmax"] == pytest.approx(float(finite.abs().max()), rel=1e-12)
    assert s["rms"] == pytest.approx(float(finite.pow(2).mean().sqrt()), rel=1e-6)
    nz = finite[finite != 0]
    exps = torch.floor(torch.log2(nz.abs())).long()
    assert sum(s["exp_hist"].values()) == nz.numel()
    assert s["exp_hist"][str(int(exps.min()))] == int((exps == exps.min()).sum())


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_tensor_stats_of_float8_counts_every_value(dtype):
    # Oracle: torch's own float8 values read as float32, and its casts to float16.
    gen = torch.Generator().manual_seed(2)
    t = (torch.randn(4096, generator=gen) * 300).to(dtype)
    s = ampscope.tensor_stats(t)
    wide = t.float()
    assert s["count"] == t.numel() and s["nan"] == int(wide.isnan().sum())
    assert s["zeros"] == int((wide == 0).sum())
    assert s["absmax"] == float(wide[wide.isfinite()].abs().max())
    assert s["subnormal"]["float16"] == oracle(wide, torch.float16)["subnormal"]


STATS_BY_BUILD = (
    "import json, torch, ampscope\n"
    "from ampscope import _core\n"
    "g = torch.Generator().manual_seed(2)\n"
    "out = {'builds': _core.ops().stats_builds()}\n"
    "for d in ('float32', 'float16', 'bfloat16'):\n"
    "    t = (torch.randn(1 << 17, generator=g) * 300).to(getattr(torch, d))\n"
    "    out[d] = ampscope.tensor_stats(t)\n"
    "print(json.dumps(out))\n")


def test_the_stats_build_the_environment_names_counts_the_same(run_py, monkeypatch):
    """AMPSCOPE_STATS_ISA picks the kernel build for every dtype (here the portable one); its
    counts equal the default builds' value for value, its sums agree to rounding. A name it does
    not know is one line on stderr, and the default builds run."""
    monkeypatch.delenv("AMPSCOPE_STATS_ISA", raising=False)
    default = run_py("-c", STATS_BY_BUILD)
    monkeypatch.setenv("AMPSCOPE_STATS_ISA", "portable")
    portable = run_py("-c", STATS_BY_BUILD)
    monkeypatch.setenv("AMPSCOPE_STATS_ISA", "avx9")
    unknown = run_py("-c", STATS_BY_BUILD)
    for r in (default, portable, unknown):
        assert r.returncode == 0, r.stderr
    a, b, c = (json.loads(r.stdout) for r in (default, portable, unknown))
    assert b["builds"] == ("float32 portable, float16 portable, bfloat16 portable "
                           "(AMPSCOPE_STATS_ISA=portable)")
    assert "AMPSCOPE_STATS_ISA" not in a["builds"] and c["builds"] == a["builds"]
    assert "AMPSCOPE_STATS_ISA=avx9 is not a build" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    for d in ("float32", "float16", "bfloat16"):
        assert a[d]["overflow"]["float8_e4m3fn"] > 0  # values past 448: thresholds exercised
        for key, value in a[d].items():
            if key in ("mean", "rms"):
                assert b[d][key] == pytest.approx(value, rel=1e-6), (d, key)
            else:
                assert b[d][key] == value, (d, key)
        assert c[d] == a[d]


def test_profiled_op_entry_stats_equal_torch():
    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 1000.0

    m, x = Scale(), torch.randn(300, 7) * 100
    with ampscope.profile(model=m, out=None) as prof:
        y = m(x)
    [entry] = ops(prof.report, "", "aten::mul")
    s = entry["stats"]
    assert s["count"] == y.numel()
    assert s["overflow"]["float16"] == oracle(y, torch.float16)["overflow"] > 0
    assert s["absmax"] == pytest.approx(float(y.abs().max()))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 5)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(5, 2)

    def forward(self, x):
        h = self.act(self.fc1(x))
        return self.fc2(h) + torch.nn.Identity()(h[:, :2])  # built on the fly: counts as root


def test_backward_and_parameter_gradients_land_under_their_layers():
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with ampscope.profile(model=m, out=None) as prof:
        for _ in range(2):
            m(torch.randn(4, 6)).pow(2).sum().backward()
            opt.step()
            opt.zero_grad()
    r = prof.report
    assert r["run"]["steps"] == 2
    for name in ("fc1", "fc2"):
        assert ops(r, name, "AddmmBackward0", "backward"), name
        params = {p["name"]: p for p in layer(r, name)["params"]}
        assert set(params) == {f"{name}.weight", f"{name}.bias"}
        assert all(p["updates"] == 2 for p in params.values())
    assert ops(r, "act", "ReluBackward0", "backward")
    names = {l["name"] for l in r["layers"]}
    module_names = {n for n, _ in m.named_modules()}
    assert names - {"<outside>"} <= module_names  # every layer is a named_modules() name
    assert ops(r, "", "aten::slice")  # the on-the-fly Identity's caller, the root
    assert any(o["phase"] == "optimizer" for l in r["layers"] for o in l["ops"])


def grad_counts(g):
    """Torch's own counts of a gradient (the oracle of a stats block)."""
    nz = g[g.isfinite() & (g != 0)].double()
    exps = torch.floor(torch.log2(nz.abs())).long()
    return {"count": g.numel(), "nan": int(g.isnan().sum()), "zeros": int((g == 0).sum()),
            "absmax": float(nz.abs().max()), "absmin_nonzero": float(nz.abs().min()),
            "exp_hist": {str(int(e)): int((exps == e).sum()) for e in exps.unique()},
            **{f"{k}.float16": v for k, v in oracle(g, torch.float16).items()}}


def stats_counts(s):
    return {"count": s["count"], "nan": s["nan"], "zeros": s["zeros"], "absmax": s["absmax"],
            "absmin_nonzero": s["absmin_nonzero"], "exp_hist": s["exp_hist"],
            **{f"{k}.float16": s[k]["float16"] for k in ("overflow", "underflow", "subnormal")}}


def test_autocast_weight_gradients_are_exact_and_read_once():
    """Under autocast a float32 weight's gradient is the bfloat16 gradient of its cast, widened
    (ToCopyBackward0): its stats are that read's, not a second one. Oracle: torch's counts of
    p.grad. Then a NaN written into the float32 gradient where torch does not see it (.data: no
    version bump), before its AccumulateGrad: a second read would find it; none is made."""
    def run(poke):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
        if poke:
            m[0].weight.register_hook(lambda g: g.data.view(-1).__setitem__(0, math.nan))
        with ampscope.profile(model=m, out=None) as prof:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = m(torch.randn(64, 128)).float().pow(2).mean()
            loss.backward()
        return m, {p["name"]: p["grad"] for l in prof.report["layers"] for p in l["params"]}

    m, grads = run(poke=False)
    for name in ("0.weight", "2.weight"):
        p = dict(m.named_parameters())[name]
        assert stats_counts(grads[name]) == grad_counts(p.grad), name
    m, grads = run(poke=True)
    assert int(m[0].weight.grad.isnan().sum()) == 1  # the write reached the gradient
    assert grads["0.weight"]["nan"] == 0  # taken from the bfloat16 read, not read again


def test_several_roots_keep_distinct_names():
    a, b = Net(), Net()
    with ampscope.profile(out=None) as prof:
        a(torch.randn(2, 6))
        b(torch.randn(2, 6))
    names = {l["name"] for l in prof.report["layers"]}
    assert "fc1" in names and "Net.fc1" in names


def test_apply_precision_map_pins_exactly_the_listed_modules():
    m = Net()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pinned = ampscope.apply_precision_map(
            m, {"schema": "ampscope.precision_map/1", "pin_fp32": ["fc2", "nope"], "why": {}})
    assert pinned == ["fc2"]
    assert any("nope" in str(w.message) for w in caught)
    with ampscope.profile(model=m, out=None) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(torch.randn(3, 6))
    r = prof.report
    [fc2] = ops(r, "fc2", "aten::linear")
    assert fc2["compute_dtype"] == fc2["output_dtype"] == "float32" and fc2["autocast"] == "none"
    [fc1] = ops(r, "fc1", "aten::linear")
    assert fc1["compute_dtype"] == fc1["output_dtype"] == "bfloat16"
    assert out.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_pin_in_a_model_converted_to_low_precision_as_a_whole(dtype):
    # model.half() / torch_dtype=: no autocast, the pinned module's own weights are low
    # precision. The pin made its input float32 against them ("mat1 and mat2 must have the same
    # dtype"). Now it computes on float32 copies of them and hands its input's dtype on.
    # Oracle: the same module computed in float64 from the same stored weights and inputs.
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Softmax(-1), torch.nn.Linear(8, 2))
    m = m.to(dtype)
    x = torch.randn(3, 6).to(dtype)
    ampscope.apply_precision_map(m, {"schema": "ampscope.precision_map/1", "pin_fp32": ["0"]})
    with ampscope.profile(model=m, out=None) as prof:
        y = m(x)
        y.float().sum().backward()
    assert y.dtype == dtype and m[0].weight.grad.dtype == dtype  # stored weights stay as they were
    [lin] = ops(prof.report, "0", "aten::linear")
    assert lin["compute_dtype"] == "float32"
    h = m[0](x)
    assert h.dtype == dtype
    wide = x.double() @ m[0].weight.double().T + m[0].bias.double()
    # computed wide, rounded once to the input's dtype: within half an ulp of the float64 result
    half_ulp = 0.5 * torch.finfo(dtype).eps * wide.abs() + 1e-12
    assert ((h.double() - wide).abs() <= half_ulp).all()
    # gradients reach the stored low-precision weights
    assert torch.isfinite(m[0].weight.grad.float()).all() and m[0].weight.grad.abs().sum() > 0


def test_a_pin_passes_named_tuples_and_dict_types_through():
    # one traversal casts the pinned call's arguments and, in a converted model, its outputs:
    # a named tuple kept its fields (it raised TypeError on the way in) and was cast on the way
    # out (it was handed on float32)
    import collections
    Pair = collections.namedtuple("Pair", "x scale")

    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, p):
            return Pair(self.lin(p.x) * p.scale, p.scale)

    m = Scaled().half()
    ampscope.apply_precision_map(m, {"schema": "ampscope.precision_map/1", "pin_fp32": [""]})
    out = m(Pair(torch.randn(2, 4).half(), 2))
    assert isinstance(out, Pair) and out.x.dtype == torch.float16 and out.scale == 2


def test_compiled_modules_are_named_as_not_observed():
    m = torch.compile(Net(), backend="eager")
    with ampscope.profile(out=None) as prof:
        m(torch.randn(2, 6))
    notes = " ".join(prof.report["run"]["notes"])
    assert "Net runs through torch.compile" in notes


def test_read_counts_are_the_elements_a_recorded_step_read():
    """torch.ops.ampscope.read_counts (what the benchmarks divide by their steps): a module's
    output read by a stats pass once; the module-output check of the same buffer afterwards
    comes from the read cache. Oracle: the output's size."""
    from ampscope import _core
    model = Calls.One(torch.relu)
    x = torch.randn(64, 128)
    with ampscope.profile(model=model, out=None):
        before = _core.ops().read_counts()
        y = model(x)
        mid = _core.ops().read_counts()
        assert not _core.ops().any_nonfinite([y, y.t()])
        after = _core.ops().read_counts()
    assert [m - b for m, b in zip(mid, before)] == [y.numel(), 0, 0]
    assert [a - m for a, m in zip(after, mid)] == [0, 0, 2 * y.numel()]
