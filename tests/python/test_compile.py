"""torch.compile'd models observed per layer (issue 19): the oracle is ampscope's own eager
report of the same model and torch's eager outputs. CPU inductor; skipped without its C++
compiler."""
import copy
import math
import shutil

import pytest
import torch

import ampscope


def _inductor_cpu_ok():
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        get_cpp_compiler()
    except Exception as e:  # noqa: BLE001 (any failure means no C++ compiler)
        return f"inductor's C++ compiler is not available: {e}"
    return None if shutil.which("g++") or shutil.which("c++") or shutil.which("clang++") else \
        "no C++ compiler on PATH for inductor"


_SKIP = _inductor_cpu_ok()
pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

EAGER_MATMUL = {"aten::linear", "aten::matmul", "aten::addmm", "aten::mm", "aten::bmm",
                "aten::baddbmm", "AddmmBackward0", "MmBackward0", "BmmBackward0"}
GRAPH_MATMUL = {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm"}


class FFN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wi, self.wo = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.wo(torch.relu(self.wi(x)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.attn, self.ffn = torch.nn.LayerNorm(16), torch.nn.Linear(16, 16), FFN()

    def forward(self, x):
        h = self.attn(self.ln(x))
        scores = torch.softmax(h @ h.transpose(-1, -2), dim=-1)
        return x + self.ffn(scores @ h)


class Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.ln_f, self.head = torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln_f(x))


def _train(model, dtype, steps, compiled, plant_at=None, observe=True):
    """Runs `steps` SGD steps under CPU autocast; returns (report or None, outputs per step)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fn = torch.compile(model) if compiled else model
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
    outs = []

    def loop():
        for step in range(steps):
            if step == plant_at:  # T5's wo: its output grows past float16's largest value
                with torch.no_grad():
                    model.blocks[1].ffn.wo.weight.mul_(1e5)
            with torch.autocast("cpu", dtype):
                y = fn(x)
            outs.append(y.detach().float().clone())
            y.float().sum().backward()
            opt.step()
            opt.zero_grad()

    if not observe:
        loop()
        return None, outs
    with ampscope.profile(out=None) as prof:
        loop()
    return prof.report, outs


def _matmul_dtypes(report, names):
    """{(layer, phase): sorted compute dtypes of its matmul entries}."""
    table = {}
    for layer in report["layers"]:
        for op in layer["ops"]:
            if op["op"] in names:
                table.setdefault((layer["name"], op["phase"]), set()).add(op["compute_dtype"])
    return {k: sorted(v) for k, v in table.items()}


@pytest.fixture(scope="module")
def bf16_runs():
    torch.manual_seed(0)
    base = Stack()
    eager, eager_out = _train(copy.deepcopy(base), torch.bfloat16, 2, compiled=False)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    plain, plain_out = _train(copy.deepcopy(base), torch.bfloat16, 2, compiled=True, observe=False)
    plain_graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    observed, observed_out = _train(copy.deepcopy(base), torch.bfloat16, 2, compiled=True)
    counters = copy.deepcopy(torch._dynamo.utils.counters)
    return dict(eager=eager, eager_out=eager_out, plain_out=plain_out, observed=observed,
                observed_out=observed_out, plain_graphs=plain_graphs, counters=counters)


def test_compiled_layers_compute_in_the_eager_dtypes(bf16_runs):
    eager = _matmul_dtypes(bf16_runs["eager"], EAGER_MATMUL)
    compiled = _matmul_dtypes(bf16_runs["observed"], GRAPH_MATMUL)
    assert eager, "the eager run recorded no matmuls"
    assert compiled == eager  # same layers, forward and backward, same compute dtypes
    assert ("blocks.0.ffn.wo", "forward") in compiled and ("blocks.0.ffn.wo", "backward") in compiled
    by_name = {layer["name"]: layer for layer in bf16_runs["observed"]["layers"]}
    wi = [op for op in by_name["blocks.1.ffn.wi"]["ops"] if op["op"] == "aten::addmm"][0]
    assert (wi["input_dtype"], wi["compute_dtype"], wi["autocast"]) == \
        ("float32", "bfloat16", "lower_precision")
    ln = [op for op in by_name["blocks.0.ln"]["ops"] if op["op"] == "aten::var_mean"]
    assert ln and ln[0]["compute_dtype"] == "float32" and ln[0]["stats"]["count"] > 0
    # the graph's own extern calls are folded in, not listed under the root
    root = by_name.get("", {"ops": []})
    assert not [op for op in root["ops"] if op["op"] in GRAPH_MATMUL]
    assert any("observed at" in n for n in bf16_runs["observed"]["run"]["notes"])


def test_observation_causes_no_graph_breaks_or_recompiles(bf16_runs):
    counters = bf16_runs["counters"]
    assert not counters["graph_break"]
    assert counters["stats"]["unique_graphs"] == bf16_runs["plain_graphs"]


def test_observed_outputs_stay_close_to_unobserved_and_eager(bf16_runs):
    for plain, observed, eager in zip(bf16_runs["plain_out"], bf16_runs["observed_out"],
                                      bf16_runs["eager_out"]):
        # materialised intermediates may round differently: bounded by bfloat16's resolution
        scale = plain.abs().max().item()
        assert (observed - plain).abs().max().item() <= 2 ** -7 * scale
        assert (observed - eager).abs().max().item() <= 2 ** -6 * scale


def test_planted_float16_overflow_found_where_eager_finds_it_and_map_removes_it():
    torch.manual_seed(0)
    base = Stack()
    eager, _ = _train(copy.deepcopy(base), torch.float16, 4, compiled=False, plant_at=2)
    torch._dynamo.reset()
    compiled, _ = _train(copy.deepcopy(base), torch.float16, 4, compiled=True, plant_at=2)
    e, c = eager["first_nonfinite"], compiled["first_nonfinite"]
    assert e is not None and c is not None
    assert (c["layer"], c["step"], c["phase"], c["kind"]) == (e["layer"], e["step"], e["phase"],
                                                            e["kind"]) == \
        ("blocks.1.ffn.wo", 2, "forward", "inf")
    assert c["op"] == "aten::addmm" and c["inputs_finite"]
    pins = [r["layer"] for r in compiled["recommendations"] if r["action"] == "pin_fp32"]
    assert pins == ["blocks.1.ffn.wo"]
    # the map applied before compiling: dynamo traces the pinned forward (autocast off)
    torch._dynamo.reset()
    pinned_model = copy.deepcopy(base)
    ampscope.apply_precision_map(pinned_model, {"schema": "ampscope.precision_map/1",
                                                "pin_fp32": pins})
    pinned, _ = _train(pinned_model, torch.float16, 4, compiled=True, plant_at=2)
    assert pinned["first_nonfinite"] is None
    wo = [layer for layer in pinned["layers"] if layer["name"] == "blocks.1.ffn.wo"][0]
    fwd = [op for op in wo["ops"] if op["op"] == "aten::addmm" and op["phase"] == "forward"]
    assert fwd and all(op["compute_dtype"] == "float32" for op in fwd)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_stock_sdpa_models_compiled_are_clean_as_in_eager(kind):
    # The causal mask (-inf) the compiled graph builds once, in the first layer's scope, and
    # every layer reads is consumed by the attention: benign, as in eager. It was a critical
    # pin on the first layer's attention.
    transformers = pytest.importorskip("transformers")
    if kind == "gpt2":
        config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64,
                                         n_positions=16, attn_implementation="sdpa")
        build = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=2,
                                          num_key_value_heads=2, attn_implementation="sdpa")
        build = transformers.LlamaForCausalLM
    torch.manual_seed(0)
    model = build(config)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
    torch._dynamo.reset()
    fn = torch.compile(model)
    with ampscope.profile(out=None) as prof:
        with torch.autocast("cpu", torch.bfloat16):
            out = fn(ids, labels=ids)
        out.loss.backward()
    assert math.isfinite(out.loss.item())
    assert prof.report["first_nonfinite"] is None
    assert prof.report["recommendations"] == []
    names = {l["name"] for l in prof.report["layers"]}
    assert not any(n.startswith("0.") for n in names), sorted(names)  # no decorator's args[0]


def test_gpt2_compiled_layers_match_eager():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16,
                                     attn_implementation="eager")
    torch.manual_seed(0)
    base = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
    reports = []
    for compiled in (False, True):
        torch._dynamo.reset()
        model = copy.deepcopy(base)
        fn = torch.compile(model) if compiled else model
        with ampscope.profile(out=None) as prof:
            with torch.autocast("cpu", torch.bfloat16):
                out = fn(ids, labels=ids)
            out.loss.backward()
        reports.append(prof.report)
    # the causal mask (-inf) the compiled graph builds once, in the first layer's scope, and
    # every layer reads is consumed by softmax: benign, as in eager (it was a false pin)
    for report in reports:
        assert report["first_nonfinite"] is None and report["recommendations"] == []
    eager = _matmul_dtypes(reports[0], EAGER_MATMUL)
    compiled = _matmul_dtypes(reports[1], GRAPH_MATMUL)
    assert ("transformer.h.1.mlp.c_fc", "forward") in eager
    # every layer whose matmuls eager saw is observed in the compiled graphs, same dtypes
    for key, dtypes in eager.items():
        assert compiled.get(key) == dtypes, key


def test_stop_on_nonfinite_stops_after_the_compiled_forward_that_made_it():
    torch.manual_seed(0)
    model = Stack()
    fn = torch.compile(model)
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(1))
    done = []
    with pytest.raises(ampscope.NonFiniteStop) as stop:
        with ampscope.profile(out=None, stop_on_nonfinite=True):
            for step in range(4):
                if step == 2:
                    with torch.no_grad():
                        model.blocks[1].ffn.wo.weight.mul_(1e6)
                with torch.autocast("cpu", torch.float16):
                    y = fn(x)
                done.append(step)  # not reached at step 2: the stop comes as fn returns
                y.float().sum().backward()
                ampscope.step()
    assert done == [0, 1]
    assert (stop.value.event["layer"], stop.value.event["step"]) == ("blocks.1.ffn.wo", 2)


def test_layer_names_from_dynamo_module_paths():
    from ampscope._compile import layer_name
    assert layer_name("L['self'].h[0].attn") == "h.0.attn"
    assert layer_name("L['self']") == ""
    # a forward wrapped by a *args decorator (transformers 5's): the module is args[0]
    assert layer_name("L['args'][0].model.layers[0].self_attn") == "model.layers.0.self_attn"
    assert layer_name("L['self']._orig_mod.blocks[1]") == "blocks.1"


class UpDown(torch.nn.Module):
    """The relu between the layers is the model's own forward: no module holds it."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def test_an_overflow_the_roots_own_code_consumes_is_found_at_its_step():
    # up's -inf are zeroed by the root's relu; up's output still left up (to the root's code),
    # so its step-1 overflow is harmful at step 1, as eager says (compiled said step 2).
    steps = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = UpDown()
        fn = torch.compile(model) if compiled else model
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1)).abs()
        with ampscope.profile(out=None) as prof:
            for step in range(3):
                if step == 1:  # every output of up -inf in float16, which relu makes 0
                    with torch.no_grad():
                        model.up.weight.copy_(-model.up.weight.abs() * 1e5)
                        model.up.bias.zero_()
                with torch.autocast("cpu", torch.float16):
                    y = fn(x)
                y.float().sum().backward()
                opt.step()
                opt.zero_grad()
        e = prof.report["first_nonfinite"]
        steps[compiled] = (e["step"], e["layer"])
    assert steps[False] == steps[True] == (1, "up")


class BreakingFFN(torch.nn.Module):
    """A module whose forward breaks dynamo's graph: the rest of it, and the modules after it,
    are compiled as frames of their own, with module paths relative to them."""

    def __init__(self):
        super().__init__()
        self.wi, self.wo = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.relu(self.wi(x))
        torch._dynamo.graph_break()
        return self.wo(h)


class Decoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.ffn = torch.nn.Linear(16, 16), BreakingFFN()

    def forward(self, x):
        return self.ffn(self.inp(x))


class EncDec(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc, self.dec, self.head = torch.nn.Linear(16, 16), Decoder(), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.dec(self.enc(x)))


def _planted_run(model, compiled, steps=3, plant_at=1):
    """float16 autocast; from step `plant_at` dec.ffn.wo's output overflows."""
    torch._dynamo.reset()
    fn = torch.compile(model) if compiled else model
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with ampscope.profile(out=None) as prof:
        for step in range(steps):
            if step == plant_at:
                with torch.no_grad():
                    model.dec.ffn.wo.weight.mul_(1e6)
            with torch.autocast("cpu", torch.float16):
                y = fn(x)
            y.float().sum().backward()
            opt.step()
            opt.zero_grad()
    return prof.report


def test_a_graph_break_inside_a_submodule_keeps_the_full_layer_names():
    # The frames compiled after the break are Decoder.forward, BreakingFFN.forward, its resume
    # function, and EncDec's resume holding head as a stack value: their paths are relative to
    # dec, dec.ffn and head. They were named 'inp', 'wi', 'wo' and '' (a map pinned nothing).
    torch.manual_seed(0)
    base = EncDec()
    known = {name for name, _ in base.named_modules()}
    eager = _planted_run(copy.deepcopy(base), compiled=False)
    compiled = _planted_run(copy.deepcopy(base), compiled=True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > 1  # the break happened
    names = {layer["name"] for layer in compiled["layers"]}
    assert names - {"<outside>"} <= known, sorted(names - known)
    graph_ops = {layer["name"] for layer in compiled["layers"]
                 if any(op["op"] == "aten::addmm" for op in layer["ops"])}
    assert {"enc", "dec.inp", "dec.ffn.wi", "dec.ffn.wo", "head"} <= graph_ops
    e, c = eager["first_nonfinite"], compiled["first_nonfinite"]
    assert (c["layer"], c["step"], c["phase"]) == (e["layer"], e["step"], e["phase"]) == \
        ("dec.ffn.wo", 1, "forward")
    pins = [r["layer"] for r in compiled["recommendations"] if r["action"] == "pin_fp32"]
    assert pins == ["dec.ffn.wo"]


class BreakingStack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([BreakingFFN(), BreakingFFN()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_graph_one_frame_serves_for_several_modules_is_named_relative_and_said_so():
    # dynamo guards BreakingFFN's frame by type, not identity: the graph compiled for
    # layers.0 runs for layers.1 too. A name baked into it would give layers.1's ops to
    # layers.0, so they stay relative, and run.notes says which modules share it.
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = BreakingStack()
    fn = torch.compile(model)
    with ampscope.profile(out=None) as prof:
        fn(torch.randn(4, 16)).sum().backward()
    ops = {layer["name"] for layer in prof.report["layers"]
           if any(op["op"] == "aten::addmm" for op in layer["ops"])}
    assert {"wi", "wo"} <= ops and not ops & {"layers.0.wi", "layers.0.wo"}, sorted(ops)
    notes = [n for n in prof.report["run"]["notes"] if "serve every BreakingFFN" in n]
    assert len(notes) == 1 and "(layers.0, layers.1)" in notes[0], prof.report["run"]["notes"]


def test_stock_t5_compiled_keeps_its_decoder_prefix():
    # T5Stack.forward breaks the graph; encoder and decoder are both T5Stack, told apart by
    # the is_decoder guard. The decoder's layers lost 'decoder.' (audit, 2026-12-07).
    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                   num_heads=2, decoder_start_token_id=0)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(config)
    known = {name for name, _ in model.named_modules()}
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(2))
    torch._dynamo.reset()
    fn = torch.compile(model)
    with ampscope.profile(out=None) as prof:
        with torch.autocast("cpu", torch.bfloat16):
            out = fn(input_ids=ids, labels=ids)
        out.loss.backward()
    names = {layer["name"] for layer in prof.report["layers"]}
    assert names - {"<outside>"} <= known, sorted(names - known)
    assert any(n.startswith("decoder.block.0.layer.1.EncDecAttention") for n in names)


def test_torch_compile_called_while_profiling():
    # `python -m ampscope train.py` profiles from the start, so the script's torch.compile runs
    # inside the profile: it deep-copies inductor's config, pass included. The pass held the
    # tracker (thread-locals): "cannot pickle '_thread._local' object".
    import warnings
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = EncDec()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filters = list(warnings.filters)
        with ampscope.profile(out=None) as prof:
            fn = torch.compile(model)
            with torch.autocast("cpu", torch.bfloat16):
                fn(torch.randn(4, 16)).float().sum().backward()
        added = [f for f in warnings.filters if f not in filters]  # (torch adds its own too)
        restored = not [f for f in added if "global hooks" in getattr(f[1], "pattern", "")]
    names = {layer["name"] for layer in prof.report["layers"]}
    assert {"enc", "dec.inp", "dec.ffn.wi", "dec.ffn.wo", "head"} <= names
    # torch's warning that global hooks fire once more for the OptimizedModule is about these
    # hooks, which handle it: not shown while profiling, and the user's filters are as before
    assert not [w for w in caught if "global hooks" in str(w.message)]
    assert restored


class Fused(torch.nn.Module):
    """The model's own code between two Linears: inductor fuses it into b's matmul."""

    def __init__(self, between):
        super().__init__()
        self.a, self.b, self.between = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4), between

    def forward(self, x):
        return self.b(self.between(self.a(x)))


@pytest.mark.parametrize("case", ["log_relu", "exp"])
def test_a_fused_nonfinite_origin_gets_the_float32_recheck_eager_gets(case):
    # log(relu(h)) is -inf at h <= 0 in float32 too: a model bug (eager: fix_model). exp(h)
    # past 11.1 overflows float16 only: precision (eager: a pin). Fused into b's matmul point,
    # compiled runs had no float32 re-check (null) and pinned both.
    between = {"log_relu": lambda h: torch.log(torch.relu(h)),
               "exp": lambda h: torch.exp(h * 8)}[case]
    verdicts = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = Fused(between)
        fn = torch.compile(model) if compiled else model
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
        with ampscope.profile(out=None) as prof:
            with torch.autocast("cpu", torch.float16):
                fn(x).float().sum().backward()
        e = prof.report["first_nonfinite"]
        assert e is not None and e["step"] == 0 and e["inputs_finite"]
        actions = {r["action"] for r in prof.report["recommendations"]
                   if r["action"] in ("fix_model", "pin_fp32")}
        verdicts[compiled] = (e["fp32_also_nonfinite"], actions)
    with torch.no_grad():  # torch's own float32 answer for the fused code
        torch.manual_seed(0)
        model = Fused(between)
        h = model.a(torch.randn(4, 16, generator=torch.Generator().manual_seed(1)))
        fp32_nonfinite = not torch.isfinite(model.b(between(h))).all().item()
    assert verdicts[True][0] is fp32_nonfinite
    assert verdicts[True][1] == verdicts[False][1] == \
        ({"fix_model"} if fp32_nonfinite else {"pin_fp32"}), verdicts


class TinyLM(torch.nn.Module):
    """Embedding, two Linears on 3-d activations, and the loss inside forward (as HF models
    compute it): compiled whole, no op of the run is an eager one under autocast."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(32, 16)
        self.up = torch.nn.Linear(16, 32, bias=False)  # no bias: mm, as in Llama
        self.head = torch.nn.Linear(32, 32, bias=False)

    def forward(self, ids):
        logits = self.head(torch.relu(self.up(self.emb(ids))))
        return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.flatten())


def test_a_model_compiled_whole_is_known_to_run_under_autocast():
    # The matmuls see autocast's casts through the views between them (a 3-d input viewed to
    # 2-d, the weight permuted): they were 'none', so a run with no eager op under autocast
    # had no autocast dtype ("autocast off"), and every rule keyed to the run's format (loss
    # scaling, overflow_<fmt>) went quiet. Oracle: the eager run of the same model.
    ids = torch.randint(0, 32, (4, 8), generator=torch.Generator().manual_seed(3))
    reports = {}
    for compiled in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = TinyLM()
        fn = torch.compile(model) if compiled else model
        with ampscope.profile(out=None) as prof:
            with torch.autocast("cpu", torch.float16):
                loss = fn(ids)
            loss.backward()
        reports[compiled] = prof.report
    assert reports[True]["run"]["autocast_dtype"] == reports[False]["run"]["autocast_dtype"] \
        == "float16"
    for layer in ("up", "head"):
        ops = [op for lay in reports[True]["layers"] if lay["name"] == layer for op in lay["ops"]
               if op["op"] in GRAPH_MATMUL and op["phase"] == "forward"]
        assert ops and all(op["autocast"] == "lower_precision" for op in ops), (layer, ops)
