"""Unsampled steps of the Python front end are watched, not observed op by op (issue 14): module
outputs and parameter gradients are checked for NaN/Inf, and a module whose output went
non-finite is replayed from the same inputs and RNG state under the per-op sentinel to name the
op. The oracle is the same run profiled with every=1 (every op observed by the per-op sentinel)
and, for "the profiler changes nothing", the same run unprofiled."""
import copy
import gc
import math

import pytest
import torch
from torch import nn

import ampscope

STEPS, PLANT = 6, 3  # the planted step is unsampled with every=4 (steps 0 and 4 are recorded)


class Inner(nn.Module):
    """A module holding others (its output is checked on a watched step): BatchNorm (buffers a
    replay must put back), dropout (randomness a replay must reproduce), a float16 matmul."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(16)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16, 16)
        self.gain = 1.0

    def forward(self, x):
        return self.fc(self.drop(self.bn(x)) * self.gain)


class Model(nn.Module):
    """Inner's overflow is cleaned up by the model itself (like T5's clamp), so training stays
    finite and the run can be compared value for value with an unprofiled one."""

    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = torch.nan_to_num(self.inner(x), nan=0.0, posinf=1e4, neginf=-1e4)
        return self.head(h)


def train(model, profile_kw=None, plant=None):
    """STEPS float16-autocast steps with SGD; `plant(model, step)` sets the planted fault."""
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    data = [(torch.randn(8, 16), torch.randn(8, 1)) for _ in range(STEPS)]
    ctx = ampscope.profile(model=model, out=None, **profile_kw) if profile_kw is not None else None
    if ctx:
        ctx.__enter__()
    try:
        for step, (x, y) in enumerate(data):
            if plant:
                plant(model, step)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    return ctx.report if ctx else None


def overflow_at_plant(model, step):
    model.inner.gain = 1e6 if step == PLANT else 1.0


def origin(report):
    e = report["first_nonfinite"]
    assert e is not None, "no first_nonfinite"
    return {k: e[k] for k in ("step", "phase", "layer", "op", "kind", "inputs_finite", "fp32_also_nonfinite")}


def fresh_model():
    torch.manual_seed(0)
    return Model()


def test_forward_origin_on_an_unsampled_step_is_the_per_op_one():
    per_op = origin(train(fresh_model(), dict(every=1), overflow_at_plant))
    watched = train(fresh_model(), dict(every=4), overflow_at_plant)
    # the float16 matmul overflowed from finite inputs at the planted step; its float32 re-run is
    # finite: named the same way whether the step was observed op by op or replayed
    assert per_op == {"step": PLANT, "phase": "forward", "layer": "inner.fc", "op": "aten::linear",
                      "kind": per_op["kind"], "inputs_finite": True,
                      "fp32_also_nonfinite": False}
    assert per_op["kind"] in ("inf", "nan")
    assert origin(watched) == per_op
    assert watched["run"]["sampling"]["every"] == 4
    assert any("watched at module outputs" in n for n in watched["run"]["notes"])
    assert watched["recommendations"][0]["layer"] == "inner.fc"


@pytest.mark.parametrize("every", [1, 4])
def test_stop_on_nonfinite_stops_at_an_unsampled_steps_forward_origin(every):
    # The replay names the origin inside the watched module's hook: the stop must reach the
    # training loop then (it used to be swallowed with the replay's own errors), at the same
    # step as a run that records every step.
    seen = []

    def plant(model, step):
        seen.append(step)
        overflow_at_plant(model, step)

    with pytest.raises(ampscope.NonFiniteStop):
        train(fresh_model(), dict(every=every, stop_on_nonfinite=True), plant)
    assert seen[-1] == PLANT


def test_a_replay_changes_nothing_the_run_computes():
    """Parameters, BatchNorm's running stats and the RNG state after training with a replay
    (dropout inside the replayed module) equal those of the unprofiled run, bit for bit."""
    plain, profiled = fresh_model(), fresh_model()
    train(plain, None, overflow_at_plant)
    rng_plain = torch.get_rng_state()
    report = train(profiled, dict(every=4), overflow_at_plant)
    rng_profiled = torch.get_rng_state()
    assert report["first_nonfinite"]["step"] == PLANT  # a replay did run
    for (name, a), (_, b) in zip(plain.state_dict().items(), profiled.state_dict().items()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True, msg=name)
    assert torch.equal(rng_plain, rng_profiled)


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_replay_inside_activation_checkpointing_leaves_its_backward_alone(reentrant):
    """The checkpointed block's output overflows on an unsampled step, so the watch replays the
    block from its forward hook, inside the checkpoint. Non-reentrant checkpointing counts the
    tensors saved there: the replay's made the user's backward raise CheckpointError (HF
    transformers 5's gradient_checkpointing_enable() and timm's default). Oracle: the same loop
    unprofiled (losses bit for bit) and the planted layer and step."""
    from torch.utils.checkpoint import checkpoint

    def run(options):
        torch.manual_seed(0)
        blk = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
        model = nn.ModuleDict({"blk": blk, "head": nn.Linear(16, 4)})
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
        losses = []

        def loop():
            for step in range(3):
                if step == 1:
                    with torch.no_grad():
                        blk[2].weight.mul_(1e6)
                with torch.autocast("cpu", torch.float16):
                    h = checkpoint(model["blk"], x, use_reentrant=reentrant)
                    loss = model["head"](h).float().sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())

        if options is None:
            loop()
            return None, losses
        with ampscope.profile(out=None, **options) as prof:
            loop()
        return prof.report, losses

    _, plain = run(None)
    report, profiled = run(dict(every=2))
    assert str(profiled) == str(plain)  # nan == nan as text
    e = report["first_nonfinite"]
    assert (e["layer"], e["step"], e["phase"]) == ("blk.2", 1, "forward"), e


class Parent(nn.Module):
    """The parent's own op (exp of a large value, float32) makes the inf, then hands it to a child
    holding modules; the parent cleans its own output up afterwards."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(16, 16)
        self.child = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)
        self.gain = 1.0

    def forward(self, x):
        h = torch.exp(self.pre(x) * self.gain)
        h = torch.nan_to_num(self.child(h), nan=0.0, posinf=1e4, neginf=-1e4)
        return self.head(h)


def test_values_made_by_the_parents_own_op_are_not_blamed_on_the_child():
    def plant(model, step):
        model.gain = 1e4 if step == PLANT else 1.0

    reports = []
    for every in (1, 4):
        torch.manual_seed(0)
        reports.append(train(Parent(), dict(every=every), plant))
    per_op, watched = (origin(r) for r in reports)
    assert (per_op["layer"], per_op["op"], per_op["step"]) == ("", "aten::exp", PLANT)
    assert origin(reports[1]) == per_op


class Boom(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by `gain` (inf at the planted step)."""

    @staticmethod
    def forward(ctx, x, gain):
        ctx.gain = gain
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.gain, None


class BackwardModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(16, 16)
        self.last = nn.Linear(16, 1)
        self.gain = 1.0

    def forward(self, x):
        return self.last(Boom.apply(self.first(x), self.gain))


def test_a_gradient_made_non_finite_on_an_unsampled_step_is_found_at_its_step():
    def plant(model, step):
        model.gain = float("inf") if step == PLANT else 1.0

    torch.manual_seed(0)
    per_op = train(BackwardModel(), dict(every=1), plant)
    torch.manual_seed(0)
    watched = train(BackwardModel(), dict(every=4), plant)
    e1, e4 = per_op["first_nonfinite"], watched["first_nonfinite"]
    # op by op: the custom node that multiplied by inf; watched: the first parameter gradient it
    # reached (the node before `last` in backward is Boom; `first` is where it lands)
    assert (e1["step"], e1["phase"], e1["layer"]) == (PLANT, "backward", "")
    assert "Boom" in e1["op"]
    assert (e4["step"], e4["phase"], e4["layer"]) == (PLANT, "backward", "first")
    assert e4["op"].startswith("grad of first.")
    assert any(f"from step {PLANT} unsampled steps ran the per-op sentinel" in n
               for n in watched["run"]["notes"])


def test_parameters_an_unobserved_optimizer_step_wrote_are_blamed_on_it():
    def plant(model, step):
        # SGD with an infinite learning rate at the planted step writes inf/NaN into the weights
        for group in plant.opt.param_groups:
            group["lr"] = float("inf") if step == PLANT else 1e-2

    def run(every):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        plant.opt = opt
        data = [(torch.randn(8, 16), torch.randn(8, 1)) for _ in range(STEPS)]
        with ampscope.profile(model=model, out=None, every=every) as prof:
            for step, (x, y) in enumerate(data):
                plant(model, step)
                loss = nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
        return prof.report["first_nonfinite"]

    per_op, watched = run(1), run(4)
    assert (per_op["step"], per_op["phase"]) == (PLANT, "optimizer")
    # watched: found when the next forward reads the weights, named as the step that wrote them
    assert (watched["step"], watched["phase"]) == (PLANT, "optimizer")
    assert watched["op"].startswith("optimizer step")
    assert watched["layer"] in ("0", "2")


def adamw_nan_on_the_last_step(width, **profile_kw):
    """Three AdamW steps of a small MLP, the last with an infinite learning rate (finite
    gradients, no forward after it): the NaN is the optimizer's. Returns the profile and, per
    step, what the observer read during opt.step() (read counts)."""
    from ampscope import _core
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = [(torch.randn(8, width), torch.randn(8, 1)) for _ in range(3)]
    reads = []
    with ampscope.profile(model=model, out=None, **profile_kw) as prof:
        for step, (x, y) in enumerate(data):
            if step == 2:
                opt.param_groups[0]["lr"] = float("inf")
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            assert all(torch.isfinite(p.grad).all() for p in model.parameters())
            before = _core.ops().read_counts()
            opt.step()
            reads.append([a - b for a, b in zip(_core.ops().read_counts(), before)])
    assert not all(torch.isfinite(p).all() for p in model.parameters())  # the NaN is real
    e = prof.report["first_nonfinite"]
    assert (e["step"], e["phase"]) == (2, "optimizer"), e
    assert e["layer"] in ("0", "2") and e["op"].startswith("optimizer step"), e
    return prof, reads, sum(p.numel() for p in model.parameters())


def test_a_recorded_optimizer_steps_nan_is_found_when_the_step_ends():
    """A recorded step does not read an optimizer's float32 outputs op by op: the parameters are
    checked once when the step ends. A NaN the optimizer makes on the run's last step is still
    found, at that step, in the parameter's layer. Oracle: the weights themselves."""
    prof, _, _ = adamw_nan_on_the_last_step(16, every=1)
    # the optimizer's ops are still recorded (calls), their float32 outputs not read
    assert any(o["phase"] == "optimizer" for l in prof.report["layers"] for o in l["ops"])


def test_the_per_op_sentinels_optimizer_nan_is_found_when_the_step_ends():
    """Unsampled steps under the per-op sentinel skip the optimizer's float32 outputs too (a
    third of what the sentinel scanned in an AdamW loop) and check the parameters the step
    wrote when it ends. Oracle: the weights; the read counts of an unsampled step's opt.step()
    (the stepped parameters once, no optimizer output)."""
    _, reads, params = adamw_nan_on_the_last_step(64, every=1000, sentinel="ops")
    assert reads[1][0] == 0 and reads[1][1] <= params, (reads[1], params)


class OneAfterAnother(torch.optim.Optimizer):
    """Plain SGD, one parameter after the other; on its call number `poison_at`, the first
    parameter (or its first row) is then multiplied by inf: a write after the loop has moved
    on, in place or through `p.data`. Read counts are taken before and after each parameter's
    update (`reads`)."""

    def __init__(self, params, poison_at, how):
        super().__init__(params, dict(lr=0.1))
        self.poison_at, self.how, self.calls, self.reads = poison_at, how, 0, []

    @torch.no_grad()
    def step(self):
        from ampscope import _core
        through_data = self.how != "in place"
        params = [p.data if through_data else p for p in self.param_groups[0]["params"]]
        grads = [p.grad for p in self.param_groups[0]["params"]]
        self.reads = [list(_core.ops().read_counts())]
        for p, g in zip(params, grads):
            p.add_(g, alpha=-0.1)
            self.reads.append(list(_core.ops().read_counts()))
        if self.calls == self.poison_at:
            (params[0][:1] if self.how == "first row through p.data" else params[0]).mul_(math.inf)
        self.calls += 1


@pytest.mark.parametrize("how", ["in place", "through p.data", "first row through p.data"])
@pytest.mark.parametrize("every", [1, 1000])
def test_a_parameter_written_again_after_the_optimizer_moved_on_is_checked_again(how, every):
    """An optimizer that updates parameters one after the other has each scanned when its ops go
    on to the next one, while it is in cache (every=1: a recorded step; every=1000 with the
    per-op sentinel: an observed unsampled step). A write after that scan, in place, through
    `p.data` (its own version counter) or through a view of part of it, must not leave the
    step's check with the stale scan. Oracles: the weights themselves; the read counts after
    each update (the first weight is read when the next parameter's update runs, not before)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(96, 96), nn.Linear(96, 1))
    steps = 3
    opt = OneAfterAnother(model.parameters(), steps - 1, how)
    kw = dict(every=every, sentinel="ops") if every > 1 else dict(every=every)
    with ampscope.profile(model=model, out=None, **kw) as prof:
        for _ in range(steps):
            loss = model(torch.randn(8, 96)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            scanned = [r[1] for r in opt.reads]
            assert scanned[1] == scanned[0], opt.reads  # the first update: nothing read yet
            assert scanned[2] - scanned[1] == model[0].weight.numel(), opt.reads  # moved on
    assert not torch.isfinite(model[0].weight).all()  # the NaN/Inf is real
    e = prof.report["first_nonfinite"]
    assert e is not None and (e["step"], e["phase"], e["layer"]) == (steps - 1, "optimizer", "0"), e


@pytest.mark.parametrize("every", [1, 1000])
def test_an_optimizer_step_that_spoils_every_parameter_is_named_by_the_first_it_wrote(every):
    """When one optimizer step makes every parameter non-finite, the origin is the parameter the
    step wrote first (the optimizer's order: here a middle layer's first, then the model's), the
    same on a recorded step and under the per-op sentinel (the check once followed a hash map's
    order: the last layer's here). Oracle: the optimizer's own parameter order, and the weights
    themselves."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(8)], nn.Linear(32, 1))
    first_layer = model[3]  # the optimizer's order: a middle layer's parameters first
    params = list(first_layer.parameters())
    params += [p for p in model.parameters() if not any(p is q for q in params)]
    opt = torch.optim.SGD(params, lr=0.01, foreach=False)
    kw = dict(every=every, sentinel="ops") if every > 1 else dict(every=every)
    with ampscope.profile(model=model, out=None, **kw) as prof:
        for step in range(3):
            if step == 2:
                opt.param_groups[0]["lr"] = math.inf
            loss = model(torch.randn(8, 32)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not any(torch.isfinite(p).all() for p in params)  # every one of them spoiled
    e = prof.report["first_nonfinite"]
    assert (e["step"], e["phase"], e["layer"]) == (2, "optimizer", "3"), e


def test_a_dead_models_parameters_are_not_taken_for_a_later_tensors():
    """Parameters are known by their TensorImpl. A model profiled and freed must not make a
    later tensor at one of its parameters' addresses a "parameter an unobserved optimizer step
    made non-finite": NaN/Inf of unknown source reaching the host are named by the op that first
    saw them. (Tensors made right after the free take the freed TensorImpls' memory; the build
    that held raw pointers blamed an optimizer step here, and in a GradScaler run after another
    profiled model it reported the scaler's caught overflow as harmful.)"""
    def train_one_step(model, opt):
        loss = model(torch.randn(4, 8)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    old = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    opt = torch.optim.SGD(old.parameters(), lr=0.1)
    with ampscope.profile(model=old, out=None):
        train_one_step(old, opt)
    del old, opt
    gc.collect()
    held = [torch.full((3,), math.inf) for _ in range(64)]  # where the parameters were
    new = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    opt = torch.optim.SGD(new.parameters(), lr=0.1)
    with ampscope.profile(model=new, out=None) as prof:
        train_one_step(new, opt)
        assert torch.stack(held).sum().item() == math.inf  # (torch's own account)
    first = prof.report["first_nonfinite"]
    assert (first["op"], first["reached"], first["phase"]) == ("aten::stack", "host_read", "forward")


def test_a_clean_watched_run_has_no_finding_and_records_the_sampled_steps_only():
    reports = [train(fresh_model(), dict(every=every)) for every in (1, 4)]
    for r in reports:
        assert r["first_nonfinite"] is None and r["recommendations"] == []
    calls = [sum(op["calls"] for layer in r["layers"] for op in layer["ops"]) for r in reports]
    # steps 0 and 4 of 6 recorded: a third of the calls
    assert calls[1] * 3 == calls[0]


def test_the_per_op_sentinel_can_be_chosen_for_unsampled_steps():
    chosen = train(fresh_model(), dict(every=4, sentinel="ops"), overflow_at_plant)
    assert origin(chosen) == origin(train(fresh_model(), dict(every=1), overflow_at_plant))
    assert not any("watched at module outputs" in n for n in chosen["run"]["notes"])
    with pytest.raises(ValueError, match="sentinel"):
        ampscope.profile(out=None, sentinel="everything")


@pytest.mark.parametrize("kind", ["t5", "gpt2", "llama", "bert"])
def test_stock_models_watched_stay_clean_and_train_exactly_as_unprofiled(kind):
    """Real models nobody here wrote (transformers from configs, dropout on where the config
    has it): with every=2 the unsampled steps are watched; nothing is found, and the losses are
    those of the unprofiled run, bit for bit."""
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from test_real_verdicts import BUILDERS, batch

    def run(profiled):
        model = BUILDERS[kind]()
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        b = batch(kind)
        torch.manual_seed(5)  # dropout masks
        losses = []
        ctx = ampscope.profile(out=None, every=2) if profiled else None
        if ctx:
            ctx.__enter__()
        for _ in range(5):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(**b).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if ctx:
            ctx.__exit__(None, None, None)
        return losses, ctx.report if ctx else None

    plain, _ = run(False)
    watched, report = run(True)
    assert watched == plain
    assert report["first_nonfinite"] is None and report["recommendations"] == []
    assert any("watched at module outputs" in n for n in report["run"]["notes"])


def train_scaled(every, planted=(3, 6), steps=11):
    """float16 steps with a GradScaler; the loss of the planted steps overflows the float16
    gradients, so the scaler skips them. Returns the report (None unprofiled), the scaler's
    scale after each update, and the final parameters."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(m.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=3)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)) for _ in range(steps)]
    ctx = ampscope.profile(model=m, out=None, every=every) if every else None
    if ctx:
        ctx.__enter__()
    scales = []
    try:
        for step, (x, y) in enumerate(data):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.mse_loss(m(x).float(), y) * (1e9 if step in planted else 1.0)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
    return (ctx.report if ctx else None), scales, [p.detach().clone() for p in m.parameters()]


def test_a_gradscaler_run_watched_keeps_every_update():
    """Watched steps of a run with a GradScaler leave the op callbacks off until the scaler's
    unscale (a light callback waits for it), then see its update: the loss-scale history and the
    skipped steps are those of the run observed op by op, both overflows are caught by the
    scaler and none is harmful, and training is unchanged. (Run after other tests' profiled
    models: their freed parameters once made this run's gradients "parameters".)"""
    _, scales, plain = train_scaled(None)
    per_op, scales1, p1 = train_scaled(1)
    watched, scales4, p4 = train_scaled(4)
    assert scales1 == scales4 == scales
    history = [(p["step"], p["scale"], p["found_inf"]) for p in per_op["loss_scale"]]
    assert history == [(s, scales[s], s in (3, 6)) for s in range(len(scales))]
    assert [(p["step"], p["scale"], p["found_inf"]) for p in watched["loss_scale"]] == history
    for r in (per_op, watched):
        assert r["run"]["steps"] == len(scales)
        assert r["first_nonfinite"] is None
        caught = r["nonfinite_caught_by_scaler"]
        assert caught["steps"] == 2 and caught["first"]["phase"] == "backward"
    assert per_op["nonfinite_caught_by_scaler"]["first"]["step"] == 3
    for a, b, c in zip(plain, p1, p4):  # the profiler changes nothing
        assert torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("kind", ["mlp", "resnet18"])
def test_nonfinite_data_on_an_unsampled_step_is_named_outside_as_a_recorded_step_does(kind):
    # A NaN pixel or feature in the batch of step 3 (unsampled with every=4): no module made it,
    # so the verdict is the data's (`<outside>`, fix_model / nonfinite_input), as with every=1,
    # not a model bug in the first module it enters.
    def run(every):
        torch.manual_seed(0)
        if kind == "mlp":
            model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
            batches = [torch.randn(4, 8) for _ in range(STEPS)]
        else:
            torchvision = pytest.importorskip("torchvision")
            model = torchvision.models.resnet18(num_classes=4)
            batches = [torch.randn(2, 3, 32, 32) for _ in range(STEPS)]
        batches[PLANT].view(-1)[5] = float("nan")  # the data loader's doing
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        with ampscope.profile(out=None, every=every) as prof:
            for x in batches:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = model(x)
                out.float().sum().backward()
                opt.step()
                opt.zero_grad()
        return prof.report

    for every in (1, 4):
        report = run(every)
        e = report["first_nonfinite"]
        assert (e["step"], e["layer"], e["inputs_finite"], e["kind"]) == (PLANT, "<outside>", False, "nan")
        assert [(r["layer"], r["action"], r["reasons"]) for r in report["recommendations"]
                if r["severity"] == "critical"] == [("<outside>", "fix_model", ["nonfinite_input"])]
