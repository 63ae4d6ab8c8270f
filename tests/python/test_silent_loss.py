"""Silent precision loss end to end through the Python front end: values narrowing casts destroy,
outputs that lose every value, float16 weights whose updates round away. Oracles are torch's own
casts, a float32 re-run and the weights compared around optimizer.step() here."""
import pytest
import torch
import torch.nn.functional as F

import ampscope


def recs(report, action=None):
    return [r for r in report["recommendations"] if action is None or r["action"] == action]


def layer(report, name):
    return next(l for l in report["layers"] if l["name"] == name)


def silent_reasons(report):
    return [(r["layer"], reason) for r in report["recommendations"] for reason in r["reasons"]
            if reason.startswith(("cast_", "degenerate_output_", "stale_updates_"))]


class TinyConv(torch.nn.Module):
    """A conv whose weights are far below float16's smallest subnormal (~6e-8)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)
        with torch.no_grad():
            self.conv.weight.mul_(1e-9)
            self.conv.bias.zero_()

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3)))


def train(model, steps, autocast_dtype=None, lr=0.1, **prof):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    with ampscope.profile(model=model, out=None, **prof) as p:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=autocast_dtype or torch.float16,
                                enabled=autocast_dtype is not None):
                loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return p.report, x


def test_conv_weights_below_float16_subnormals_are_named():
    model = TinyConv()
    w = model.conv.weight.detach().clone()
    seen = []  # the weight each step (SGD moves it out of the hole at step 1); cast afterwards
    model.conv.register_forward_pre_hook(lambda m, a: seen.append(m.weight.detach().clone()))
    report, x = train(model, 2, torch.float16)
    lost = [int((v.to(torch.float16) == 0).sum()) for v in seen]  # torch's own cast
    assert lost[0] == w.numel()
    # the planted loss is real: float16 gives an all-zero output, float32 does not
    assert F.conv2d(x.half(), w.half(), padding=1).count_nonzero() == 0
    assert F.conv2d(x, w, padding=1).abs().max() > 0
    [conv] = [o for o in layer(report, "conv")["ops"] if o["op"] == "aten::conv2d"]
    [cast] = [c for c in conv["cast_loss"] if c["argument"] == "weight"]
    assert cast["parameter"] and cast["casts"] == 2  # once per recorded step
    assert cast["underflow"] == sum(lost) and cast["target_dtype"] == "float16"
    assert conv["degenerate_output"]["degenerate"] >= 1
    [pin] = [r for r in recs(report, "pin_fp32") if r["layer"] == "conv"]
    assert pin["severity"] == "high"
    assert {"cast_underflow_float16", "degenerate_output_float16"} <= set(pin["reasons"])
    assert pin["evidence"]["cast_loss"][0]["worst_rel_l2"] == 1.0  # step 0 computed nothing


def test_the_precision_map_removes_the_cast_loss_and_names_the_next_one():
    model = TinyConv()
    pooled = []  # what the head receives: float32 activations of ~1e-9 once conv is pinned
    model.head.register_forward_pre_hook(lambda m, a: pooled.append(a[0].detach().clone()))
    report, _ = train(model, 1, torch.float16,
                      precision_map={"schema": "ampscope.precision_map/1", "pin_fp32": ["conv"]})
    [conv] = [o for o in layer(report, "conv")["ops"] if o["op"] == "aten::conv2d"]
    assert conv["compute_dtype"] == "float32" and "cast_loss" not in conv
    assert "degenerate_output" not in conv
    # the loss moved on, truly: torch's cast of the head's input zeroes it
    [cast] = [c for o in layer(report, "head")["ops"] for c in o.get("cast_loss", [])
              if c["argument"] == "input"]
    assert cast["underflow"] == int((pooled[0].to(torch.float16) == 0).sum()) > 0
    assert ("head", "cast_underflow_float16") in silent_reasons(report)


class Explicit(torch.nn.Module):
    """The model's own narrowing cast of small activations."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.lin((x * 1e-8).to(torch.float16).float())


def test_explicit_half_cast_in_model_code_is_fix_model():
    torch.manual_seed(0)
    model = Explicit()
    x = torch.randn(8, 16)
    oracle = int(((x * 1e-8).to(torch.float16) == 0).sum())
    with ampscope.profile(model=model, out=None) as p:
        model(x).sum().backward()
    casts = [c for o in layer(p.report, "")["ops"] for c in o.get("cast_loss", [])]
    assert [c["underflow"] for c in casts] == [oracle] and casts[0]["arg_index"] == -1
    [fix] = recs(p.report, "fix_model")
    assert fix["layer"] == "" and "cast_underflow_float16" in fix["reasons"]
    assert recs(p.report, "pin_fp32") == []  # a pin cannot undo the model's own cast


class Frames(torch.nn.Module):
    """A sequence processed frame by frame: autocast casts proj's input once per frame."""

    def __init__(self, cast_in_model=False):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(32, 32)
        self.cast_in_model = cast_in_model

    def forward(self, x):
        frames = [x[:, t].half().float() if self.cast_in_model else x[:, t] for t in range(x.shape[1])]
        return torch.stack([self.proj(f) for f in frames], 1)


@pytest.mark.parametrize("cast_in_model", [False, True], ids=["autocast", "model"])
def test_share_of_the_norm_lost_in_a_step_is_over_all_its_casts(cast_in_model):
    """One near-silent frame of 64 loses all its values to float16 but ~nothing of the step's
    input: no finding. The same frames all near-silent: the step lost everything, a high one."""
    x = torch.randn(8, 64, 32, generator=torch.Generator().manual_seed(2))
    x[:, 0] *= 1e-9  # below float16's smallest subnormal (~6e-8)
    for tiny, expect in ((x, False), (x * 1e-9, True)):
        model = Frames(cast_in_model)
        with ampscope.profile(model=model, out=None) as p:
            with torch.autocast("cpu", dtype=torch.float16):
                model(tiny).float().sum().backward()
        # oracle: torch's cast, over the step's whole input
        lost = tiny[tiny.to(torch.float16) == 0]
        share = (lost.norm() / tiny.norm()).item()
        casts = [c for l in p.report["layers"] for o in l["ops"] for c in o.get("cast_loss", [])
                 if c["underflow"] > 0]
        assert sum(c["underflow"] for c in casts) == lost.numel()
        [cast] = casts
        assert cast["casts"] == 64 and cast["worst_step"] == 0
        # an upper bound within 4x of the lost sum of squares: within 2x of the norm
        assert share <= cast["worst_rel_l2"] <= max(2 * share, 1e-9) or cast["worst_rel_l2"] == 1.0 == share
        assert bool(silent_reasons(p.report)) == expect
        if expect:
            [r] = [r for r in p.report["recommendations"] if "cast_underflow_float16" in r["reasons"]]
            assert r["severity"] == "high"
            assert r["action"] == ("fix_model" if cast_in_model else "pin_fp32")


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = torch.nn.Linear(64, 64)
        self.fc2 = torch.nn.Linear(64, 1)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def stale_oracle(opt, param):
    """Elements of `param` with a nonzero gradient that keep their value through each step."""
    counts, saved = [], {}

    def pre(o, args, kwargs):
        saved["w"], saved["due"] = param.detach().clone(), param.grad.ne(0)

    def post(o, args, kwargs):
        counts.append((int(saved["due"].sum()), int((saved["due"] & param.eq(saved["w"])).sum())))

    opt.register_step_pre_hook(pre)
    opt.register_step_post_hook(post)
    return counts


def test_half_model_with_sgd_names_stale_updates():
    model = Mlp().half()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    oracle = stale_oracle(opt, model.fc1.weight)
    x = torch.randn(32, 64).half()
    with ampscope.profile(model=model, out=None) as p:
        for _ in range(3):
            loss = model(x).float().square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    [rec] = [s for s in next(q for q in layer(p.report, "fc1")["params"]
                             if q["name"] == "fc1.weight")["stale_updates"]]
    assert rec["dtype"] == "float16" and rec["steps"] == 3
    assert (rec["updated"], rec["stale"]) == tuple(map(sum, zip(*oracle)))
    assert rec["stale"] > 0.5 * rec["updated"]  # the planted stall is real
    [fix] = [r for r in recs(p.report, "fp32_master_weights") if r["layer"] == "fc1"]
    assert fix["reasons"] == ["stale_updates_float16"] and fix["severity"] == "high"
    assert p.report["first_nonfinite"] is None  # stalled, never a NaN


def test_float32_master_weights_under_autocast_stay_silent():
    model = Mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(32, 64)
    with ampscope.profile(model=model, out=None) as p:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(x).float().square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert recs(p.report, "fp32_master_weights") == []
    assert all("stale_updates" not in q for l in p.report["layers"] for q in l["params"])


def test_parameter_values_count_what_torchs_casts_lose():
    model = Mlp()
    with torch.no_grad():
        model.fc1.weight[:8].mul_(1e-8)  # a few rows below float16's subnormals
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # frozen: values stay, no stale watch
    with ampscope.profile(model=model, out=None) as p:
        model(torch.randn(4, 64)).sum().backward()
        opt.step()
    w = model.fc1.weight.detach()
    [q] = [q for q in layer(p.report, "fc1")["params"] if q["name"] == "fc1.weight"]
    v = q["values"]
    assert v["count"] == w.numel()
    assert v["underflow"]["float16"] == int(((w.to(torch.float16) == 0) & (w != 0)).sum())
    e4m3 = w.to(torch.float8_e4m3fn).float()
    assert v["underflow"]["float8_e4m3fn"] == int(((e4m3 == 0) & (w != 0)).sum())


def _real_models():
    transformers = pytest.importorskip("transformers")
    torchvision = pytest.importorskip("torchvision")
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2))
    ids = torch.randint(128, (2, 16), generator=torch.Generator().manual_seed(0))
    resnet = torchvision.models.resnet18(num_classes=10)
    img = torch.randn(2, 3, 32, 32)
    return [(gpt2, lambda m: m(input_ids=ids, labels=ids).loss),
            (resnet, lambda m: m(img).square().mean())]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
def test_real_models_lose_nothing_silently(dtype):
    for model, loss_of in _real_models():
        torch.manual_seed(0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        with ampscope.profile(model=model, out=None) as p:
            for _ in range(2):
                with torch.autocast("cpu", dtype=dtype):
                    loss = loss_of(model)
                opt.zero_grad()
                loss.backward()
                opt.step()
        assert silent_reasons(p.report) == [], type(model).__name__
