"""Real PyTorch features under ampscope: --shadow with random ops, torch.func transforms,
reentrant and non-reentrant activation checkpointing, several optimizers. Oracle: the same
training unprofiled (bit-identical results) and torch's own values."""
import pytest
import torch
import torch.utils.checkpoint as ckpt

import ampscope


def layer(report, name):
    found = [l for l in report["layers"] if l["name"] == name]
    assert found, f"no layer {name!r} in {[l['name'] for l in report['layers']]}"
    return found[0]


class Noisy(torch.nn.Module):
    """Draws random numbers in forward: dropout and randn_like."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 1)
        self.drop = torch.nn.Dropout(0.3)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))
        return self.fc2(h + 0.01 * torch.randn_like(h))


def train_noisy(profile_kwargs=None, steps=3):
    torch.manual_seed(0)
    model = Noisy()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []

    def loop():
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())

    if profile_kwargs is None:
        loop()
        return losses, [p.detach().clone() for p in model.parameters()], None
    with ampscope.profile(model=model, out=None, **profile_kwargs) as prof:
        loop()
    return losses, [p.detach().clone() for p in model.parameters()], prof.report


def test_shadow_restores_the_random_state_it_consumed():
    bare_losses, bare_params, _ = train_noisy()
    losses, params, report = train_noisy({"shadow": True})
    assert losses == bare_losses
    assert all(torch.equal(a, b) for a, b in zip(params, bare_params))
    # the shadow did run on the deterministic low-precision ops
    shadowed = [o for l in report["layers"] for o in l["ops"] if o.get("shadow")]
    assert any(o["op"] in ("aten::linear", "aten::addmm") for o in shadowed), shadowed


def test_torch_func_grad_vmap_and_functional_call_never_crash():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    params = {k: v.detach() for k, v in model.named_parameters()}
    x, y = torch.randn(5, 4), torch.randn(5, 1)

    def loss(p, xb, yb):
        return (torch.func.functional_call(model, p, (xb,)) - yb).pow(2).mean()

    want_grad = torch.func.grad(loss)(params, x, y)
    want_per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(
        params, x.unsqueeze(1), y.unsqueeze(1))
    with ampscope.profile(model=model, out=None) as prof:
        got_grad = torch.func.grad(loss)(params, x, y)
        got_per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(
            params, x.unsqueeze(1), y.unsqueeze(1))
        full = loss(dict(model.named_parameters()), x, y)
        full.backward()  # the parameter hooks see plain gradients here
    for k in params:
        assert torch.equal(got_grad[k], want_grad[k])
        assert torch.equal(got_per_sample[k], want_per_sample[k])
    r = prof.report
    notes = " ".join(r["run"]["notes"])
    assert "torch.func" in notes, notes
    [w] = [p for p in layer(r, "0")["params"] if p["name"] == "0.weight"]
    assert w["grad"]["count"] == 12 and w["grad"]["absmax"] == model[0].weight.grad.abs().max().item()


class Blocks(torch.nn.Module):
    def __init__(self, reentrant, plant=False):
        super().__init__()
        self.inp = torch.nn.Linear(8, 8)
        self.mid = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 1)
        self.reentrant, self.plant = reentrant, plant

    def block(self, h):
        h = self.mid(h)
        return torch.log(h - 1e6) if self.plant else torch.relu(h)  # NaN made in `mid`'s scope

    def forward(self, x):
        h = self.inp(x)
        h = ckpt.checkpoint(self.block, h, use_reentrant=self.reentrant)
        return self.out(h)


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpointed_layers_are_recorded_under_their_names(reentrant):
    torch.manual_seed(0)
    model = Blocks(reentrant)
    x = torch.randn(4, 8, requires_grad=True)
    with ampscope.profile(model=model, out=None) as prof:
        model(x).sum().backward()
    r = prof.report
    fwd = [o for o in layer(r, "mid")["ops"] if o["op"] == "aten::linear" and o["phase"] == "forward"]
    assert fwd and fwd[0]["calls"] == 1 and fwd[0]["stats"]["count"] == 32
    bwd = [o for o in layer(r, "mid")["ops"] if o["phase"] == "backward" and o["op"].endswith("Backward0")]
    assert bwd, layer(r, "mid")["ops"]


@pytest.mark.parametrize("reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_nan_inside_a_checkpointed_layer_is_attributed_to_it(reentrant):
    torch.manual_seed(0)
    model = Blocks(reentrant, plant=True)
    with ampscope.profile(model=model, out=None) as prof:
        model(torch.randn(4, 8, requires_grad=True)).sum().backward()
    e = prof.report["first_nonfinite"]
    assert e and e["op"] == "aten::log" and e["phase"] == "forward", e
    assert e["layer"] in ("", "mid"), e  # log runs in the block's own scope (the root's code)
    assert e["layer"] != "<outside>"


def test_a_module_called_from_a_gradient_hook_is_backward_work():
    # A module running inside backward is a reentrant checkpoint's recomputation only with grad
    # mode on; one a gradient hook calls (grad mode off) is backward work, recorded as such.
    torch.manual_seed(0)
    net, probe = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
    seen = []

    def hook(grad):
        seen.append(torch.is_grad_enabled())
        probe(grad)
    with ampscope.profile(out=None) as prof:
        h = net(torch.randn(4, 8))
        h.register_hook(hook)
        h.sum().backward()
    assert seen == [False]
    ops = [o for lay in prof.report["layers"] if lay["name"] == "Linear" for o in lay["ops"]
           if o["op"] == "aten::linear"]
    assert ops and all(o["phase"] == "backward" and o["calls"] == 1 for o in ops), ops


def test_two_optimizers_count_one_step_per_training_step():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.Adam(b.parameters())
    with ampscope.profile(out=None) as prof:
        for _ in range(4):
            b(a(torch.randn(2, 4))).sum().backward()
            opt_a.step()
            opt_b.step()
            opt_a.zero_grad()
            opt_b.zero_grad()
    assert prof.report["run"]["steps"] == 4


def test_ampscope_step_with_an_optimizer_counts_each_step_once():
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with ampscope.profile(out=None) as prof:
        for _ in range(5):
            m(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            ampscope.step()
    assert prof.report["run"]["steps"] == 5


def test_the_users_gradient_hooks_keep_running_during_and_after_profiling():
    """A parameter's own gradient hooks (here one that halves the gradient, registered before the
    profile, and one registered while it runs) are the user's training: they run under the
    profiler and after it exactly as without it, and ampscope still records every gradient (the
    modified one). Oracle: the same training unprofiled, bit for bit."""
    def train(profiled):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        seen = []
        m[0].weight.register_hook(lambda g: g * 0.5)

        def step():
            m(torch.randn(4, 8)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()

        report = None
        if profiled:
            with ampscope.profile(model=m, out=None) as prof:
                step()
                m[2].weight.register_hook(lambda g: seen.append(g.clone()))  # while profiling
                step()
            report = prof.report
        else:
            step()
            m[2].weight.register_hook(lambda g: seen.append(g.clone()))
            step()
        step()  # after the profile
        return [p.detach().clone() for p in m.parameters()], seen, report

    want, want_seen, _ = train(False)
    got, got_seen, report = train(True)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert len(got_seen) == len(want_seen) == 2
    assert all(torch.equal(a, b) for a, b in zip(got_seen, want_seen))
    params = {p["name"]: p for l in report["layers"] for p in l["params"]}
    assert params["0.weight"]["updates"] == params["2.weight"]["updates"] == 2


def test_a_parameter_given_data_of_another_dtype_is_hooked_again():
    """Replacing a parameter's .data by one of another dtype makes torch drop its AccumulateGrad
    node, and ampscope's gradient hook with it: the hook moves to the new node at the next
    optimizer step. Three steps, the dtype changed before the second: the first and third
    gradients are recorded (the second, which the old node never saw, is not)."""
    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.randn(8))

        def forward(self, x):
            return (self.p * x).pow(2).sum()

    torch.manual_seed(0)
    m = Scale()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    with ampscope.profile(model=m, out=None) as prof:
        for dt in (torch.float32, torch.float64, torch.float64):
            if m.p.dtype != dt:
                m.p.data = m.p.data.to(dt)
            m(torch.randn(8, dtype=dt)).backward()
            opt.step()
            opt.zero_grad()
    [p] = [p for l in prof.report["layers"] for p in l["params"]]
    assert p["updates"] == 2
