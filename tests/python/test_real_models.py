"""Real models nobody here wrote, random-initialised, no downloads: torchvision's ResNet-18
(Conv -> BatchNorm -> ReLU(inplace=True), which global full backward hooks break) and a 2-layer
BERT from a transformers config. Every layer name must be a named_modules() name and every
Linear/Conv must compute in bfloat16 under CPU autocast."""
import pytest
import torch

import ampscope

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


def check(model, report, compute_ops):
    names = {n for n, _ in model.named_modules()}
    layers = {l["name"]: l for l in report["layers"]}
    assert set(layers) - {"<outside>"} <= names
    kinds = (torch.nn.Linear, torch.nn.Conv2d)
    checked = 0
    for name, module in model.named_modules():
        if not isinstance(module, kinds) or name not in layers:
            continue
        fwd = [o for o in layers[name]["ops"] if o["phase"] == "forward" and o["op"] in compute_ops]
        assert fwd, name
        assert {o["compute_dtype"] for o in fwd} == {"bfloat16"}, name
        assert any(o["phase"] == "backward" for o in layers[name]["ops"]), name
        checked += 1
    return checked


def test_resnet18_trains_under_the_profiler():
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with ampscope.profile(model=model, out=None) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(torch.randn(2, 3, 64, 64)),
                                                     torch.tensor([1, 2]))
        loss.backward()
        opt.step()
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    assert check(model, prof.report, {"aten::conv2d", "aten::linear"}) == convs + 1


def test_bert_two_layers_under_the_profiler():
    torch.manual_seed(0)
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=500)
    model = transformers.BertForSequenceClassification(config)
    with ampscope.profile(model=model, out=None) as prof:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(input_ids=torch.randint(0, 500, (2, 16)), labels=torch.tensor([0, 1]))
        out.loss.backward()
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert check(model, prof.report, {"aten::linear"}) == linears
