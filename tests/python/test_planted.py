"""Planted cases for the diagnosis engine, end to end through the Python front end. Each plants
one known problem at a known place and step and asserts the exact finding, with torch itself
as the oracle where numbers are checked (its casts, a float32 re-run computed here)."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

import ampscope

D, HIDDEN, CLASSES, BATCH = 32, 128, 10, 16


def recs(report, action=None):
    return [r for r in report["recommendations"] if action is None or r["action"] == action]


def pins(report):
    return sorted({r["layer"] for r in recs(report, "pin_fp32")})


class FFN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wi = torch.nn.Linear(D, HIDDEN)
        self.wo = torch.nn.Linear(HIDDEN, D)

    def forward(self, x):
        return self.wo(torch.relu(self.wi(x)))


class T5Like(torch.nn.Module):
    """norm -> FFN (wi, relu, wo) -> residual -> final norm -> head, like a T5 block."""

    def __init__(self, extra=0):
        super().__init__()
        torch.manual_seed(0)
        self.ln = torch.nn.LayerNorm(D)
        self.ffn = FFN()
        self.ln_f = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, CLASSES)

    def forward(self, x):
        x = x + self.ffn(self.ln(x))
        return self.head(self.ln_f(x))


def batch():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, D, generator=g), torch.randint(CLASSES, (BATCH,), generator=g)


def plant_wo_growth(model, x, overflow_step):
    """Scales wo so that its output absmax is 1.5 x 65504 at `overflow_step`, growing 2x a step
    (0.75 x 65504 one step earlier): the T5 wo drift, compressed."""
    with torch.no_grad():
        a0 = model.ffn(model.ln(x)).abs().max().item()
        f = 1.5 * 65504 / (a0 * 2 ** overflow_step)
        model.ffn.wo.weight.mul_(f)
        model.ffn.wo.bias.mul_(f)


def train(model, steps, x, y, grow=None, dtype=torch.float16, loss_scale=1.0):
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    for _ in range(steps):
        with torch.autocast("cpu", dtype=dtype):
            out = model(x)
        loss = F.cross_entropy(out.float(), y) * loss_scale
        opt.zero_grad()
        loss.backward()
        if torch.isfinite(loss):
            opt.step()        # marks the step
        else:
            ampscope.step()   # skipped, as a GradScaler would
        if grow is not None:
            with torch.no_grad():
                grow.weight.mul_(2.0)
                grow.bias.mul_(2.0)


# (a) ---------------------------------------------------------------------------------------

K_A, STEPS_A = 5, 8


def run_a(precision_map=None, **kw):
    model = T5Like()
    x, y = batch()
    plant_wo_growth(model, x, K_A)
    with ampscope.profile(model=model, out=None, precision_map=precision_map, **kw) as prof:
        train(model, STEPS_A, x, y, grow=model.ffn.wo)
    return prof.report


def test_a_ffn_output_projection_outgrows_float16():
    r = run_a()
    e = r["first_nonfinite"]
    assert (e["layer"], e["op"], e["step"], e["phase"]) == ("ffn.wo", "aten::linear", K_A, "forward")
    assert e["inputs_finite"] is True and e["fp32_also_nonfinite"] is False
    # The float32 re-run's evidence: the true values pass float16's max.
    assert e["fp32_check"]["fp32_absmax"] > 65504 and e["fp32_check"]["lowp_only_nonfinite"] > 0
    assert pins(r) == ["ffn.wo"]
    [pin] = recs(r, "pin_fp32")
    assert pin["severity"] == "critical" and "nonfinite_origin" in pin["reasons"]
    assert not recs(r, "fix_model")


def test_a_applying_the_map_removes_the_nonfinite_values():
    first = run_a()
    pmap = {"schema": "ampscope.precision_map/1", "pin_fp32": pins(first), "why": {}}
    r = run_a(precision_map=pmap)
    assert r["first_nonfinite"] is None
    assert pins(r) == []
    wo = next(l for l in r["layers"] if l["name"] == "ffn.wo")
    assert {o["compute_dtype"] for o in wo["ops"] if o["phase"] == "forward"} == {"float32"}
    # And it still passed 65504: pinning, not luck, kept it finite.
    assert max(o["stats"]["absmax"] for o in wo["ops"] if o["phase"] == "forward") > 65504


def test_a_stop_on_nonfinite_ends_the_run_at_the_origin(tmp_path):
    model = T5Like()
    x, y = batch()
    plant_wo_growth(model, x, K_A)
    prof = ampscope.profile(model=model, out=tmp_path, stop_on_nonfinite=True)
    with pytest.raises(ampscope.NonFiniteStop) as stop:
        with prof:
            train(model, STEPS_A, x, y, grow=model.ffn.wo)
    assert "ffn.wo" in str(stop.value) and f"step {K_A}" in str(stop.value)
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["run"]["stopped"] == "nonfinite"
    assert written["run"]["steps"] == K_A  # nothing after the origin's step was run
    assert written["first_nonfinite"]["layer"] == "ffn.wo"
    head = next(l for l in written["layers"] if l["name"] == "head")
    assert all(o["last_step"] < K_A for o in head["ops"])  # stopped before the head ran


def test_a_before_the_overflow_the_growing_layer_gets_a_headroom_warning():
    model = T5Like()
    x, y = batch()
    plant_wo_growth(model, x, K_A)
    with ampscope.profile(model=model, out=None) as prof:
        train(model, K_A, x, y, grow=model.ffn.wo)  # stops one step short of the overflow
    r = prof.report
    assert r["first_nonfinite"] is None and pins(r) == []
    [w] = recs(r, "watch")
    assert w["layer"] == "ffn.wo" and w["reasons"] == ["headroom_float16"]
    ev = w["evidence"]["headroom"][0]
    assert ev["growth_binades_per_step"] == pytest.approx(1.0, abs=0.05)  # planted: 2x a step
    assert ev["projected_overflow_step"] == K_A                          # where (a) overflows


# (b) ---------------------------------------------------------------------------------------

K_B = 3


class LogProbHead(torch.nn.Module):
    """Classifier head that takes log(softmax * keep): a zero in `keep` makes a probability
    exactly 0 and log() returns -inf, in any precision."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(D, CLASSES)
        self.register_buffer("keep", torch.ones(CLASSES))

    def forward(self, x):
        return torch.log(torch.softmax(self.proj(x), -1) * self.keep)


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Linear(D, D)
        self.head = LogProbHead()

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def test_b_log_of_exact_zero_is_a_model_bug_not_a_pin():
    model = Classifier()
    x, y = batch()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    with ampscope.profile(model=model, out=None) as prof:
        for step in range(6):
            if step == K_B:
                model.head.keep[0] = 0.0
            with torch.autocast("cpu", dtype=torch.float16):
                logp = model(x)
            loss = F.nll_loss(logp.float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step() if torch.isfinite(loss) else ampscope.step()
    r = prof.report
    e = r["first_nonfinite"]
    assert (e["layer"], e["op"], e["step"], e["phase"]) == ("head", "aten::log", K_B, "forward")
    assert e["inputs_finite"] is True and e["fp32_also_nonfinite"] is True
    assert pins(r) == []
    [fix] = recs(r, "fix_model")
    assert fix["layer"] == "head" and fix["reasons"] == ["nonfinite_in_fp32"]


# (c) ---------------------------------------------------------------------------------------

TINY = 2.0 ** -20


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
                               torch.nn.Linear(HIDDEN, CLASSES))


def fp16_lost_share(grads):
    """Oracle: the share of nonzero float32 gradient values that torch's cast to float16 turns
    into 0 or a subnormal."""
    g = torch.cat([t.flatten() for t in grads]).double()
    nz = g[g != 0]
    h = nz.to(torch.float16).double().abs()
    lost = (h == 0) | (h < 2.0 ** -14)
    assert torch.isfinite(nz.to(torch.float16)).all()
    return lost.double().mean().item()


def test_c_tiny_loss_without_scaling_asks_for_loss_scaling():
    model = mlp()
    x, y = batch()
    with ampscope.profile(model=model, out=None) as prof:
        train(model, 3, x, y, loss_scale=TINY)
    r = prof.report
    assert r["first_nonfinite"] is None
    assert pins(r) == [] and not recs(r, "fix_model")
    [ls] = recs(r, "loss_scaling")
    assert ls["reasons"] == ["grad_underflow_float16"] and ls["severity"] == "high"
    ev = ls["evidence"]["gradients"]
    scale = ev["suggested_scale"]
    assert scale > 1 and math.log2(scale) == int(math.log2(scale))
    # Oracle: the same model's float32 gradients at this loss lose a large share in float16,
    # and the suggested scale brings that share down without overflowing.
    ref = mlp()
    loss = F.cross_entropy(ref(x), y) * TINY
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    before = fp16_lost_share(grads)
    after = fp16_lost_share([g * scale for g in grads])
    assert before > 0.01
    assert after < before / 10


# (d) ---------------------------------------------------------------------------------------

def test_d_clean_run_has_no_recommendations():
    model = T5Like()
    x, y = batch()
    with ampscope.profile(model=model, out=None) as prof:
        train(model, 4, x, y, dtype=torch.bfloat16)
    r = prof.report
    assert r["first_nonfinite"] is None
    assert r["recommendations"] == []
    assert r["run"]["autocast_dtype"] == "bfloat16"


# (e) ---------------------------------------------------------------------------------------

class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.src = torch.nn.Linear(D, D)
        self.l1 = torch.nn.Linear(D, D)
        self.l2 = torch.nn.Linear(D, D)
        self.l3 = torch.nn.Linear(D, CLASSES)

    def forward(self, x):
        return self.l3(torch.tanh(self.l2(torch.tanh(self.l1(self.src(x))))))


def test_e_nan_propagating_through_later_layers_pins_none_of_them():
    model = Chain()
    x, y = batch()
    with torch.no_grad():
        model.src.weight.mul_(1e5)  # src overflows float16 from the first step
    with ampscope.profile(model=model, out=None) as prof:
        train(model, 2, x, y)
    r = prof.report
    e = r["first_nonfinite"]
    assert (e["layer"], e["op"], e["step"]) == ("src", "aten::linear", 0)
    assert pins(r) == ["src"]
    for name in ("l1", "l2", "l3"):
        layer = next(l for l in r["layers"] if l["name"] == name)
        fwd = [o for o in layer["ops"] if o["phase"] == "forward" and o["op"] == "aten::linear"]
        # They did carry NaN/Inf, but only what came in.
        assert sum(o["stats"]["nan"] + o["stats"]["posinf"] + o["stats"]["neginf"] for o in fwd) > 0
        assert all(o["nonfinite_from_finite"] == 0 for o in fwd)
        assert not [x for x in r["recommendations"] if x["layer"] == name]


# --shadow ----------------------------------------------------------------------------------

def test_shadow_error_matches_a_float32_rerun_computed_here():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(32, 64)
    with torch.no_grad():
        ref = F.linear(x.double(), lin.weight.double(), lin.bias.double())
        with torch.autocast("cpu", dtype=torch.float16):
            low = lin(x).double()
    want_rel = ((low - ref).norm() / ref.norm()).item()
    want_cos = F.cosine_similarity(low.flatten(), ref.flatten(), dim=0).item()
    with ampscope.profile(model=lin, out=None, shadow=True) as prof:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            lin(x)
    [entry] = [o for o in prof.report["layers"][0]["ops"] if o["op"] == "aten::linear"]
    sh = entry["shadow"]
    assert sh["checks"] == 1 and prof.report["run"]["shadow"] is True
    # The re-run is float32, the oracle float64: they agree far below float16's error.
    assert sh["max_rel_err"] == pytest.approx(want_rel, rel=1e-3)
    assert sh["min_cosine"] == pytest.approx(want_cos, abs=1e-9)
    assert 0 < sh["max_rel_err"] < 0.01 and prof.report["recommendations"] == []


class Cancel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dot = torch.nn.Linear(3, 1, bias=False)
        with torch.no_grad():
            self.dot.weight.fill_(1.0)

    def forward(self, x):
        return self.dot(x)


def test_shadow_finds_precision_loss_from_cancellation():
    model = Cancel()
    x = torch.tensor([[10001.0, 1.0, -10000.0]] * 4)  # float16 rounds 10001 to 10000
    with ampscope.profile(model=model, out=None, shadow=True) as prof:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            got = model(x)
    assert got[0].item() != 2.0  # the planted loss is real: exact answer is 2
    [rec] = recs(prof.report, "pin_fp32")
    assert rec["layer"] == "dot" and rec["reasons"] == ["precision_loss"]
    assert rec["evidence"]["shadow"][0]["max_rel_err"] > 0.05


class OffsetThenNorm(torch.nn.Module):
    """A Linear whose output is 1000 plus a spread float16 cannot hold, then a LayerNorm."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(64, 64)
        self.ln = torch.nn.LayerNorm(64)
        with torch.no_grad():
            self.fc.weight.mul_(1e-3)
            self.fc.bias.fill_(1000.0)

    def forward(self, x):
        return self.ln(self.fc(x))


def test_shadow_takes_no_evidence_from_an_all_zero_float32_result():
    """The LayerNorm of rows float16 rounded to a constant: its float32 re-run on those rows is
    all zeros, and the low-precision result's residue (~1e-3 of a normalised output) has no
    relative error or angle to measure. Pinning it would change nothing: the rows are lost
    before it (the float32 oracle below)."""
    model = OffsetThenNorm()
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(3))
    seen = {}
    hook = model.ln.register_forward_hook(lambda m, a, o: seen.update(inp=a[0].detach()))
    with ampscope.profile(model=model, out=None, shadow=True) as prof:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            model(x)
    hook.remove()
    # the planted case is real: float32 of the same rows is all zeros
    ref = F.layer_norm(seen["inp"].float(), (64,), model.ln.weight, model.ln.bias)
    assert seen["inp"].dtype == torch.float16 and (seen["inp"] == seen["inp"][:, :1]).all()
    assert ref.abs().max() == 0
    [ln] = [o for o in next(l for l in prof.report["layers"] if l["name"] == "ln")["ops"]
            if o["op"] == "aten::layer_norm"]
    assert ln["shadow"]["checks"] == 1
    assert ln["shadow"]["min_cosine"] == 1.0 and ln["shadow"]["max_rel_err"] == 0.0
    assert not [r for r in prof.report["recommendations"] if r["layer"] == "ln"]
    # a float32 ln on those rows changes nothing: the difference is the rows, made by fc
    with torch.no_grad():
        full = model.ln(model.fc(x))
    assert (F.layer_norm(seen["inp"].float(), (64,)) - full).norm() / full.norm() > 0.5


def test_stop_on_nonfinite_from_the_command_line(run_py, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(4, 4)\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for step in range(5):\n"
        "    y = m(torch.ones(2, 4))\n"
        "    if step == 2:\n"
        "        y = torch.log(y * 0 - 1)  # NaN from finite inputs\n"
        "    y.sum().backward()\n"
        "    opt.step()\n"
        "print('finished')\n")
    res = run_py("-m", "ampscope", "--stop-on-nonfinite", "--out", tmp_path / "out", script)
    assert res.returncode == 3, res.stderr
    assert "finished" not in res.stdout
    assert "stopped at the first non-finite value" in res.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["run"]["stopped"] == "nonfinite"


def test_gradscaler_history_and_skipped_steps_are_recorded():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    # 2^24 makes the first float16 gradients overflow: the scaler skips and halves.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24, growth_interval=2)
    x = torch.randn(4, 8)
    oracle = []
    with ampscope.profile(model=m, out=None) as prof:
        for _ in range(12):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = m(x).float().pow(2).mean()
            opt.zero_grad()
            before = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            oracle.append((scaler.get_scale(), scaler.get_scale() < before))
    r = prof.report
    assert [(p["scale"], p["found_inf"]) for p in r["loss_scale"]] == oracle
    assert [p["step"] for p in r["loss_scale"]] == list(range(12))  # skipped steps end too
    assert r["run"]["steps"] == 12
    assert any(f for _, f in oracle) and not all(f for _, f in oracle)
    # The backoff is the scaler doing its job: no pins, no collapse.
    assert pins(r) == [] and not recs(r, "loss_scaling")


class BackwardOverflow(torch.nn.Module):
    """fc2's weights are large: the forward stays in range, but the gradient fc2 sends back
    (grad @ W2, about 1.5e5 here) passes 65504 in its float16 backward matmul."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(D, HIDDEN)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(HIDDEN, CLASSES)
        with torch.no_grad():
            self.fc1.weight.mul_(1e-3)
            self.fc1.bias.zero_()
            self.fc2.weight.mul_(3000.0)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_gradient_overflow_in_backward_is_found_and_not_pinned():
    model = BackwardOverflow()
    x, _ = batch()
    with ampscope.profile(model=model, out=None) as prof:
        with torch.autocast("cpu", dtype=torch.float16):
            out = model(x)
        assert torch.isfinite(out).all()
        (out.float().sum() * 100.0).backward()
    assert not torch.isfinite(model.fc1.weight.grad).all()  # the planted overflow is real
    r = prof.report
    e = r["first_nonfinite"]
    assert (e["layer"], e["phase"], e["op"], e["step"]) == ("fc2", "backward", "AddmmBackward0", 0)
    assert e["inputs_finite"] is True and e["compute_dtype"] == "float16"
    assert pins(r) == []
    [ls] = [x for x in recs(r, "loss_scaling") if "grad_overflow_float16" in x["reasons"]]
    assert ls["layer"] == "" and ls["severity"] == "critical"  # the root: the scale is global
