"""Verdicts on real models nobody here wrote (transformers from configs, random init, CPU, no
downloads), issue 12: stock models are clean in float32 and bfloat16 (T5's log(0) bucketing is
benign), a planted float16 overflow in T5's FFN `wo` is named at its step (also on an unsampled
step), model bugs are fix_model only, GradScaler backoff is information, names are exact.
Oracles: torch itself (the model's own outputs, a float32 computation, scaler.get_scale())."""
import contextlib
import json
import math
import textwrap

import pytest
import torch

import ampscope

transformers = pytest.importorskip("transformers")

VOCAB = 120


def t5(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_ff=64, num_layers=2, num_heads=4,
                                d_kv=8, decoder_start_token_id=0, dropout_rate=0.0)
    return transformers.T5ForConditionalGeneration(cfg)


def gpt2(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4)
    return transformers.GPT2LMHeadModel(cfg)


def llama(seed=0, tie=False):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, tie_word_embeddings=tie)
    return transformers.LlamaForCausalLM(cfg)


def bert(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64)
    return transformers.BertForSequenceClassification(cfg)


def batch(kind, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (2, 10), generator=g)
    if kind == "t5":
        return {"input_ids": ids, "labels": torch.randint(1, VOCAB, (2, 6), generator=g)}
    if kind == "bert":
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                "labels": torch.tensor([0, 1])}
    return {"input_ids": ids, "labels": ids}


BUILDERS = {"t5": t5, "gpt2": gpt2, "llama": llama, "bert": bert}


def train(model, kind, steps, dtype, prof_kwargs=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    b = batch(kind)
    losses = []
    with ampscope.profile(out=None, **(prof_kwargs or {})) as prof:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = model(**b).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return prof.report, losses


@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["t5", "gpt2", "llama", "bert"])
def test_stock_models_are_clean(kind, dtype):
    report, losses = train(BUILDERS[kind](), kind, 2, dtype)
    assert all(math.isfinite(l) for l in losses)  # torch's own outputs: nothing went wrong
    assert report["first_nonfinite"] is None
    assert report["recommendations"] == []
    names = {n for n, _ in BUILDERS[kind]().named_modules()}
    assert {l["name"] for l in report["layers"]} - {"<outside>"} <= names


def test_t5_log_of_zero_is_counted_benign():
    report, _ = train(t5(), "t5", 2, torch.bfloat16)
    logs = [o for l in report["layers"] for o in l["ops"] if o["op"] == "aten::log"
            and o["nonfinite_from_finite"] > 0]
    assert logs, "T5's bucketing takes log(0) every forward"
    assert all(o["benign_nonfinite"] == o["nonfinite_from_finite"] for o in logs)
    assert all(o["harmful_nonfinite"] == 0 for o in logs)


TRAIN_T5_WO = textwrap.dedent("""
    import sys, torch, transformers
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=120, d_model=32, d_ff=64, num_layers=2, num_heads=4,
                                d_kv=8, decoder_start_token_id=0, dropout_rate=0.0)
    model = transformers.T5ForConditionalGeneration(cfg)
    WO = model.encoder.block[0].layer[1].DenseReluDense.wo
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 120, (2, 10), generator=g)
    labels = torch.randint(1, 120, (2, 6), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    OVERFLOW_STEP = int(sys.argv[1])
    seen = {}
    WO.register_forward_hook(lambda m, a, out: seen.__setitem__("absmax", out.float().abs().max().item()))
    for step in range(6):
        if step == OVERFLOW_STEP:  # the T5 wo drift, compressed: 1.5 x float16's max at this step
            with torch.no_grad():
                model(input_ids=ids, labels=labels)
                WO.weight.mul_(1.5 * 65504 / seen["absmax"])
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        if torch.isfinite(loss):
            opt.step()
        else:
            import ampscope; ampscope.step()
        print("loss", step, loss.item(), flush=True)
""")

WO = "encoder.block.0.layer.1.DenseReluDense.wo"


@pytest.fixture
def t5_wo_script(tmp_path):
    p = tmp_path / "train_t5_wo.py"
    p.write_text(TRAIN_T5_WO)
    return p


@pytest.mark.parametrize("every", [1, 4])
def test_t5_float16_wo_overflow_is_named_at_its_step(run_py, tmp_path, t5_wo_script, every):
    out = tmp_path / f"every{every}"
    r = run_py("-m", "ampscope", "--out", out, "--every", every, t5_wo_script, 2)
    assert r.returncode == 0, r.stderr
    losses = [float(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("loss")]
    assert math.isfinite(losses[1]) and not math.isfinite(losses[2])  # torch: step 2 went inf
    report = json.loads((out / "report.json").read_text())
    e = report["first_nonfinite"]
    assert (e["layer"], e["step"], e["phase"], e["kind"]) == (WO, 2, "forward", "inf")
    assert e["compute_dtype"] == "float16" and e["inputs_finite"]
    assert e["fp32_also_nonfinite"] is False  # the same call in float32 is finite
    pins = sorted({x["layer"] for x in report["recommendations"] if x["action"] == "pin_fp32"})
    assert pins == [WO]
    assert report["recommendations"][0]["layer"] == WO  # the verdict names it first
    assert report["run"]["sampling"]["every"] == every


def test_t5_wo_map_removes_the_nan(cli, tmp_path, t5_wo_script):
    import sys
    base = tmp_path / "base"
    r = cli("run", "--out", base, "--", sys.executable, t5_wo_script, 2)
    assert r.returncode == 0, r.stderr
    m = json.loads((base / "precision_map.json").read_text())
    assert m["pin_fp32"] == [WO]
    v = cli("verify", "--map", base / "precision_map.json", "--out", tmp_path / "v",
            "--fail-on-nonfinite", "--", sys.executable, t5_wo_script, 2)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "gone" in v.stdout
    pinned = json.loads((tmp_path / "v" / "pinned" / "report.json").read_text())
    assert pinned["first_nonfinite"] is None


def test_stop_on_nonfinite_does_not_stop_stock_t5(run_py, tmp_path):
    script = tmp_path / "stock.py"
    script.write_text(TRAIN_T5_WO)
    r = run_py("-m", "ampscope", "--out", tmp_path / "o", "--stop-on-nonfinite", script, 99)
    assert r.returncode == 0, r.stderr  # 99: nothing planted; log(0) is benign
    assert len([l for l in r.stdout.splitlines() if l.startswith("loss")]) == 6


class MaskedEntropy(torch.nn.Module):
    """log(softmax) over -inf-masked logits: masked probabilities are exactly 0, log(0) = -inf,
    0 * -inf = NaN. A model bug in any precision."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 6)

    def forward(self, x, mask):
        p = torch.softmax(self.proj(x).masked_fill(mask, float("-inf")), dim=-1)
        return -(p * torch.log(p)).sum(-1).mean()


class ZeroOverZero(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 6)

    def forward(self, x, mask):
        h = torch.relu(self.proj(x)) * 0
        return (h / h.sum(-1, keepdim=True)).sum()


@pytest.mark.parametrize("model_cls", [MaskedEntropy, ZeroOverZero])
def test_model_bug_is_fix_model_and_never_a_pin(model_cls):
    model = model_cls()
    x = torch.randn(4, 8)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, :2] = True
    with ampscope.profile(out=None) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x, mask)
        loss.backward()
    with torch.no_grad():  # the oracle: the same model in float32 is non-finite too
        assert not torch.isfinite(model(x, mask))
    report = prof.report
    assert report["first_nonfinite"] is not None
    actions = {r["action"] for r in report["recommendations"]}
    assert "fix_model" in actions and "pin_fp32" not in actions
    fix = [r for r in report["recommendations"] if r["action"] == "fix_model"][0]
    assert fix["reasons"] == ["nonfinite_in_fp32"]


def test_gradscaler_backoff_is_information_not_failure():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    scales = []
    with ampscope.profile(out=None) as prof:
        for _ in range(8):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
    report = prof.report
    assert scales[0] < 2.0 ** 24  # the scaler did back off (torch's own account)
    assert report["first_nonfinite"] is None
    assert not [r for r in report["recommendations"] if r["severity"] == "critical"]
    caught = report.get("nonfinite_caught_by_scaler")
    assert caught and caught["steps"] >= 1 and caught["first"]["phase"] == "backward"
    assert [p["scale"] for p in report["loss_scale"]] == scales


def test_inputs_embeds_and_tied_weights_names_are_exact():
    model = llama(tie=True)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = batch("llama")["input_ids"]
    with ampscope.profile(out=None) as prof:
        for _ in range(2):
            emb = model.get_input_embeddings()(ids)  # a submodule called before its model
            loss = model(inputs_embeds=emb, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = prof.report
    names = {n for n, _ in model.named_modules()}
    assert {l["name"] for l in report["layers"]} - {"<outside>"} <= names
    params = [p for l in report["layers"] for p in l["params"]]
    unique = {id(p) for p in model.parameters()}
    assert len(params) == len(unique)  # the tied embedding/lm_head weight is one parameter
    tied = [p for p in params if p.get("aliases")]
    assert [(p["name"], p["aliases"]) for p in tied] == [("model.embed_tokens.weight",
                                                          ["lm_head.weight"])]
    grad = model.model.embed_tokens.weight.grad  # counted once: the last step's gradient
    assert tied[0]["grad"]["count"] == 2 * grad.numel()


def test_phases_setup_between_and_accumulate_grad(run_py, tmp_path):
    script = tmp_path / "phases.py"
    script.write_text(textwrap.dedent("""
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            loss = model(torch.randn(4, 8)).sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
    """))
    out = tmp_path / "o"
    r = run_py("-m", "ampscope", "--out", out, script)
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    by_phase = {}
    for l in report["layers"]:
        for o in l["ops"]:
            by_phase.setdefault(o["phase"], set()).add((l["name"], o["op"]))
    assert any(op in ("aten::normal_", "aten::uniform_") for _, op in by_phase["setup"])
    assert all(layer == "<outside>" for layer, _ in by_phase["setup"])
    assert any("norm" in op for _, op in by_phase["between"])  # clip_grad_norm_
    acc = {layer for layer, op in by_phase["backward"] if op.endswith("AccumulateGrad")}
    assert acc == {"0", "1"}


TRAINER = textwrap.dedent("""
    import sys, torch, transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64)
    model = transformers.BertForSequenceClassification(cfg)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": torch.randint(1, 120, (10,), generator=g), "labels": i % 2}
            for i in range(16)]
    args = transformers.TrainingArguments(output_dir=sys.argv[1], max_steps=3,
                                          per_device_train_batch_size=4, use_cpu=True,
                                          bf16=sys.argv[2] == "bf16", report_to=[],
                                          save_strategy="no", logging_strategy="no",
                                          dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    print("train_loss", trainer.train().training_loss)
""")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_bert_through_trainer_is_clean(run_py, tmp_path, precision):
    pytest.importorskip("accelerate")
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    out = tmp_path / "o"
    r = run_py("-m", "ampscope", "--out", out, "--stop-on-nonfinite", script, tmp_path / "t",
               precision)
    assert r.returncode == 0, r.stderr[-2000:]
    loss = float([l for l in r.stdout.splitlines() if l.startswith("train_loss")][0].split()[1])
    assert math.isfinite(loss)
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["steps"] == 3
    assert report["first_nonfinite"] is None and report["recommendations"] == []
    if precision == "bf16":
        computed = {o["compute_dtype"] for l in report["layers"] if l["name"].endswith("query")
                    for o in l["ops"] if o["op"] == "aten::linear"}
        assert computed == {"bfloat16"}


class Carrier(torch.nn.Module):
    """A layer that overflows float16 followed by a Dropout(p=0) that only passes it on."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wo = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(p=0.0)

    def forward(self, x):
        return self.drop(self.wo(x))


def test_findings_go_to_the_producer_not_a_pass_through_dropout():
    model = Carrier()
    with torch.no_grad():
        model.wo.weight.fill_(0.5)
    x = torch.full((4, 8), 16000.0)  # wo: 8 * 0.5 * 16000 = 64000, close to float16's max
    with ampscope.profile(out=None) as prof:
        with torch.autocast("cpu", dtype=torch.float16):
            y = model(x)
    assert y.abs().max().item() > 32768  # torch's own output: within a binade of the max
    layers = {r["layer"] for r in prof.report["recommendations"]}
    assert "wo" in layers and "drop" not in layers


ACT = "transformer.h.1.mlp.act"


def gpt2_gelu_overflow(act_fp32=False):
    """GPT-2 with transformer.h.1.mlp.c_fc's weight grown (x1e4) so that under float16 autocast
    its outputs stay finite (|x| ~ 1e3) but GELU's pow(x, 3) overflows; tanh turns the inf into 1,
    so the forward stays finite, and the backward's 3 * x^2 * 0 is NaN. `act_fp32`: the oracle of
    the pin, the same model with that GELU computed in float32."""
    model = gpt2()
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight.mul_(1e4)
    if act_fp32:
        act = model.transformer.h[1].mlp.act
        plain = act.forward

        def forward(x):
            with torch.autocast("cpu", enabled=False):
                return plain(x.float())
        act.forward = forward
    return model


def gpt2_gelu_overflow_step(prof_kwargs=None, act_fp32=False, loss_scale=1.0, reentrant=None):
    """One float16 step of gpt2_gelu_overflow(): the report (None unprofiled), the loss, and
    whether every parameter gradient was finite. `reentrant`: with HF's gradient checkpointing
    of that kind (None: none)."""
    model = gpt2_gelu_overflow(act_fp32)
    if reentrant is not None:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        model.train()
    b = batch("gpt2")

    def step():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(**b).loss
        (loss * loss_scale).backward()
        return loss.item(), all(bool(p.grad.isfinite().all()) for p in model.parameters()
                                if p.grad is not None)
    if prof_kwargs is None:
        return (None, *step())
    with ampscope.profile(out=None, **prof_kwargs) as prof:
        loss, finite = step()
    return prof.report, loss, finite


def test_gpt2_gelu_overflow_met_in_backward_is_a_pin_not_loss_scaling():
    # Torch's own run: finite loss, non-finite gradients; with GELU in float32 they are finite,
    # and no loss scale makes them finite (0 * inf is NaN at any scale).
    _, loss, finite = gpt2_gelu_overflow_step()
    assert math.isfinite(loss) and not finite
    assert gpt2_gelu_overflow_step(act_fp32=True)[2]
    assert not gpt2_gelu_overflow_step(loss_scale=2.0 ** -20)[2]

    report, loss2, finite2 = gpt2_gelu_overflow_step({})
    assert (loss2, finite2) == (loss, finite)  # profiling changed nothing
    e = report["first_nonfinite"]
    assert (e["layer"], e["phase"], e["kind"], e["inputs_finite"]) == (ACT, "backward", "nan", True)
    # The node whose own forward call (aten::pow) made the infs, though its gradient was summed
    # with MulBackward0's and AddBackward0's before anything saw it.
    assert e["op"] == "PowBackward0" and e["forward_nonfinite"] is True
    recs = {(r["layer"], r["action"]): r for r in report["recommendations"]}
    assert recs[(ACT, "pin_fp32")]["reasons"] == ["backward_of_forward_nonfinite"]
    assert recs[(ACT, "pin_fp32")]["severity"] == "critical"
    assert any(o["op"] == "aten::pow" for o in recs[(ACT, "pin_fp32")]["evidence"]["ops"])
    assert not any(r["action"] == "loss_scaling" and "grad_overflow_float16" in r["reasons"]
                   for r in report["recommendations"])


def test_gpt2_backward_nan_on_an_unsampled_step_claims_no_cause():
    # The same fault on step 1 of a run recording every 4th step: the watch sees the parameter
    # gradients go NaN but not what made them, so it names no cause (no fix_model, no pin, no
    # loss scaling) and says how to find it.
    model = gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    b = batch("gpt2")
    with ampscope.profile(out=None, every=4) as prof:
        for step in range(2):
            if step == 1:
                with torch.no_grad():
                    model.transformer.h[1].mlp.c_fc.weight.mul_(1e4)
            model.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(**b).loss
            loss.backward()
            finite = all(bool(p.grad.isfinite().all()) for p in model.parameters())
            assert finite == (step == 0)  # torch: the planted step's gradients are NaN
            opt.step()
    report = prof.report
    e = report["first_nonfinite"]
    assert (e["step"], e["phase"], e["inputs_finite"]) == (1, "backward", False)
    [r] = [r for r in report["recommendations"] if r["severity"] == "critical"]
    assert (r["action"], r["reasons"]) == ("watch", ["nonfinite_origin_unobserved"])
    assert not any(r["action"] in ("pin_fp32", "fix_model") for r in report["recommendations"])


@pytest.mark.parametrize("reentrant", [False, True])
def test_gpt2_gelu_overflow_under_gradient_checkpointing_gets_the_same_verdict(reentrant):
    # Reentrant checkpointing runs the block's forward without a graph and again inside
    # backward, where its ops were recorded as backward: the pow's overflow was no forward
    # creation (forward_nonfinite false: loss_scaling, critical, where the README says no scale
    # helps), the recomputed autocast Linears' nodes went to <outside>, and the recomputed
    # activations counted as gradients. Oracle: the same model without checkpointing.
    plain, loss, finite = gpt2_gelu_overflow_step({})
    report, loss2, finite2 = gpt2_gelu_overflow_step({}, reentrant=reentrant)
    assert (loss2, finite2) == (loss, finite)
    e, e0 = report["first_nonfinite"], plain["first_nonfinite"]
    keys = ("layer", "op", "phase", "forward_nonfinite", "step")
    assert {k: e[k] for k in keys} == {k: e0[k] for k in keys}
    verdict = lambda r: sorted((x["layer"], x["action"], x["severity"], tuple(x["reasons"]))  # noqa: E731
                               for x in r["recommendations"])
    assert verdict(report) == verdict(plain)

    def calls(r, phase, under=""):
        out = {}
        for layer in r["layers"]:
            for op in layer["ops"]:
                if op["phase"] == phase and layer["name"].startswith(under):
                    key = (layer["name"], op["op"])
                    out[key] = out.get(key, 0) + op["calls"]
        return out
    # recomputing counts nothing: every op of the blocks both runs have is counted as often
    # (HF's checkpointing path turns the key/value cache off, so the attention has fewer ops)
    mine, theirs = calls(report, "forward", "transformer.h."), calls(plain, "forward", "transformer.h.")
    assert {k for k in theirs if k[1] == "aten::addmm"} <= mine.keys()
    assert {k: mine[k] for k in mine.keys() & theirs.keys()} == \
        {k: theirs[k] for k in mine.keys() & theirs.keys()}
    addmm = lambda r: {k[0] for k in calls(r, "backward") if k[1] == "AddmmBackward0"}  # noqa: E731
    assert addmm(report) == addmm(plain) and "<outside>" not in addmm(report)


def test_gpt2_converted_to_float16_with_adamw_needs_float32_master_weights():
    # model.half() and AdamW: eps (1e-8) is 0 in float16, so the update is 0/0 = NaN wherever a
    # gradient is 0 (the embedding rows no token used). It was a critical pin of <outside> (no
    # module to pin, an empty map). Oracle: torch's own run of the same step.
    def step(profiled):
        model = gpt2().half()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        b = batch("gpt2")

        def run():
            model(**b).loss.backward()
            opt.step()
        if not profiled:
            run()
            return None, model
        with ampscope.profile(out=None) as prof:
            run()
        return prof.report, model

    assert torch.tensor(1e-8, dtype=torch.float16).item() == 0.0
    _, plain = step(False)
    assert any(torch.isnan(p).any() for p in plain.parameters())  # the NaN is real
    report, _ = step(True)
    e = report["first_nonfinite"]
    assert e["phase"] == "optimizer" and e["compute_dtype"] == "float16"
    recs = [(r["action"], r["severity"], r["reasons"]) for r in report["recommendations"]
            if r["severity"] == "critical"]
    assert recs == [("fp32_master_weights", "critical", ["optimizer_nonfinite_float16"])], recs
    assert not [r for r in report["recommendations"] if r["action"] == "pin_fp32"]


def gpt2_scores_overflow_step(prof_kwargs=None, pin=False):
    """GPT-2 with eager attention whose q/k projection is scaled up: the scores' float16 matmul
    overflows. Eager attention merges the heads back with a copying transpose/reshape before
    c_proj. Returns (report, loss)."""
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                  attn_implementation="eager")
    model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():
        model.transformer.h[0].attn.c_attn.weight.mul_(1000)
    if pin:
        ampscope.apply_precision_map(model, {"schema": "ampscope.precision_map/1",
                                             "pin_fp32": ["transformer.h.0.attn"]})
    ctx = ampscope.profile(out=None, **prof_kwargs) if prof_kwargs is not None else None
    with ctx or contextlib.nullcontext():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(**batch("gpt2")).loss
        loss.backward()
    return (ctx.report if ctx else None), loss.item()


@pytest.mark.parametrize("every", [1, 4])
def test_gpt2_attention_overflow_is_named_at_its_matmul_through_the_heads_merge(every):
    # Oracle: torch's run is NaN, and the same run with that attention in float32 is finite.
    _, loss = gpt2_scores_overflow_step()
    assert math.isnan(loss)
    assert math.isfinite(gpt2_scores_overflow_step(pin=True)[1])
    report, loss2 = gpt2_scores_overflow_step({"every": every})
    assert math.isnan(loss2)
    e = report["first_nonfinite"]
    attn = "transformer.h.0.attn"
    assert (e["layer"], e["op"], e["phase"], e["inputs_finite"]) == (attn, "aten::matmul", "forward", True)
    assert e["fp32_also_nonfinite"] is False
    pins = [r["layer"] for r in report["recommendations"] if r["action"] == "pin_fp32"]
    assert pins == [attn]
    # c_proj was handed the merged heads' NaN: not a model bug of its own
    assert not [r for r in report["recommendations"] if r["action"] == "fix_model"]


def test_gpt2_attention_overflow_on_an_unsampled_step_is_replayed_without_its_cache():
    # The watch replays the attention module, whose call already put its keys into the
    # model's key/value cache: the replay must neither see them twice nor add them to the
    # run's cache, and must name the op as a recorded step does.
    def run(prof_kwargs=None):
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2,
                                      n_head=4, attn_implementation="eager")
        model = transformers.GPT2LMHeadModel(cfg)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        b = batch("gpt2")
        out = []
        ctx = ampscope.profile(out=None, **prof_kwargs) if prof_kwargs is not None else None
        with ctx or contextlib.nullcontext():
            for step in range(2):
                if step == 1:
                    with torch.no_grad():
                        model.transformer.h[0].attn.c_attn.weight.mul_(1000)
                with torch.autocast("cpu", dtype=torch.float16):
                    res = model(**b, use_cache=True)
                opt.zero_grad()
                res.loss.backward()
                opt.step()
                out.append((res.loss.item(), res.past_key_values.get_seq_length(0)))
        return (ctx.report if ctx else None), out

    _, want = run()
    report, got = run({"every": 4})
    assert str(got) == str(want)  # same losses (NaN at step 1) and cache lengths as torch's run
    assert want[1][1] == batch("gpt2")["input_ids"].shape[1] and math.isnan(want[1][0])
    e = report["first_nonfinite"]
    attn = "transformer.h.0.attn"
    assert (e["step"], e["layer"], e["op"], e["inputs_finite"]) == (1, attn, "aten::matmul", True)
    assert [r["layer"] for r in report["recommendations"] if r["action"] == "pin_fp32"] == [attn]


def test_gpt2_gelu_overflow_under_a_gradscaler_is_still_a_pin():
    # A GradScaler skips the step on the NaN gradients, and again on the next: no scale makes
    # 0 * inf finite. The pin is the fix (oracle: GELU in float32, and the scaler skips nothing).
    def run(act_fp32, prof_kwargs=None):
        model = gpt2_gelu_overflow(act_fp32)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cpu")
        b = batch("gpt2")
        scales = []
        ctx = ampscope.profile(out=None, **prof_kwargs) if prof_kwargs is not None else None
        with ctx if ctx is not None else contextlib.nullcontext():
            for _ in range(3):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = model(**b).loss
                opt.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                scales.append(scaler.get_scale())
        return (ctx.report if ctx is not None else None), scales

    _, scales = run(act_fp32=False)
    assert scales == [2.0 ** 15, 2.0 ** 14, 2.0 ** 13]  # torch: every step skipped
    assert run(act_fp32=True)[1] == [2.0 ** 16] * 3  # GELU in float32: nothing skipped
    report, scales2 = run(act_fp32=False, prof_kwargs={})
    assert scales2 == scales
    caught = report["nonfinite_caught_by_scaler"]
    assert caught["steps"] == 3 and caught["first"]["op"] == "PowBackward0"
    pins = [r for r in report["recommendations"] if r["action"] == "pin_fp32"]
    assert [(r["layer"], r["severity"], r["reasons"]) for r in pins] == [
        (ACT, "high", ["backward_of_forward_nonfinite"])]


def test_stock_bert_float16_with_sgd_gets_no_cast_pin_for_its_tiny_biases():
    # HF BERT initialises biases to 0; a few SGD steps at lr 1e-3 leave 1e-10 .. 1e-7 in them,
    # all of which float16 rounds to 0. Oracle: adding those biases in float16 instead of float32
    # changes every Linear's output by far less than 1% (relative L2), so no pin is warranted.
    model = bert()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    b = batch("bert")
    with ampscope.profile(out=None) as prof:
        for _ in range(4):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = model(**b).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    report = prof.report

    worst = 0.0
    inputs = {}
    hooks = [m.register_forward_pre_hook(lambda m, a: inputs.__setitem__(m, a[0].detach()))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        model(**b)
    for h in hooks:
        h.remove()
    with torch.no_grad():
        for m, x in inputs.items():
            y = torch.nn.functional.linear(x.float(), m.weight.half().float())
            bias = m.bias.detach()
            exact, rounded = y + bias, y + bias.half().float()
            worst = max(worst, float((exact - rounded).norm() / exact.norm()))
    assert worst < 0.01
    # The casts did lose whole biases (against the bias itself, 100% of its norm) ...
    lost = [c for layer in report["layers"] for o in layer["ops"] for c in o.get("cast_loss", [])
            if c["argument"] == "bias" and c["underflow"] == c["nonzero"] > 0]
    assert lost
    # ... and none of it is a finding.
    assert not [r for r in report["recommendations"] if r["action"] in ("pin_fp32", "fix_model")]
