"""ampscope::GradScaler against torch.amp.GradScaler('cpu') on the same gradient sequences.

The C++ side runs through the `ampscope-scaler-replay` test tool (tests/grad_scaler_replay.cpp):
SGD on loss = sum_k sum(p_k * g_k) under the scaler, so each parameter's gradient is
scale * g_k. Both sides must give the same scale, growth tracker and skipped steps after every
iteration and the same final parameters, bit for bit; state dicts are exchanged both ways.
"""
import json
import math
import random
import subprocess

import pytest
import torch

from conftest import BUILD

REPLAY = BUILD / "tests" / "ampscope-scaler-replay"
DTYPES = {"float32": torch.float32, "float64": torch.float64}


def encode(x):
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def decode(x):
    return float(x)  # float("inf"), float("nan") read the strings


def sequence(seed, n, shapes=(5, 3), p_bad=0.15, p_huge=0.05, p_unscale=0.2, new_scale_at=()):
    """n iterations of random gradients with planted inf/-inf/NaN and huge finite values that
    overflow only once scaled."""
    rng = random.Random(seed)
    its = []
    for i in range(n):
        grads = []
        for size in shapes:
            g = [rng.gauss(0, 1) * 10 ** rng.randint(-3, 3) for _ in range(size)]
            if rng.random() < p_bad:
                g[rng.randrange(size)] = rng.choice([math.inf, -math.inf, math.nan])
            if rng.random() < p_huge:
                g[rng.randrange(size)] = 1e36
            grads.append([encode(x) for x in g])
        its.append({"grads": grads, "unscale_first": rng.random() < p_unscale,
                    "new_scale": 512.0 if i in new_scale_at else None})
    return its


def case(iterations, options, dtypes=("float32", "float64"), momentum=0.9, seed=0, load_state=None):
    rng = random.Random(seed + 1000)
    params = [{"dtype": d, "values": [rng.uniform(-1, 1) for _ in range(len(iterations[0]["grads"][k]))]}
              for k, d in enumerate(dtypes)]
    return {"options": options, "load_state": load_state, "sgd": {"lr": 0.01, "momentum": momentum},
            "params": params, "iterations": iterations}


def run_cpp(spec, tmp_path):
    if not REPLAY.exists():
        pytest.fail(f"{REPLAY} is missing: build the ampscope-scaler-replay target")
    src, dst = tmp_path / "in.json", tmp_path / "out.json"
    src.write_text(json.dumps(spec))
    res = subprocess.run([str(REPLAY), str(src), str(dst)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(dst.read_text())


def run_python(spec):
    """The same as grad_scaler_replay.cpp, with torch.amp.GradScaler."""
    scaler = torch.amp.GradScaler("cpu", **spec["options"])
    if spec.get("load_state") is not None:
        scaler.load_state_dict(spec["load_state"])
    params = [torch.tensor([decode(v) for v in p["values"]], dtype=torch.float64)
              .to(DTYPES[p["dtype"]]).requires_grad_() for p in spec["params"]]
    opt = torch.optim.SGD(params, lr=spec["sgd"]["lr"], momentum=spec["sgd"]["momentum"],
                          foreach=False)
    steps = []
    real_step = opt.step
    opt.step = lambda *a, **k: (steps.append(1), real_step(*a, **k))[1]
    trajectory = []
    for it in spec["iterations"]:
        opt.zero_grad()
        loss = None
        for p, g in zip(params, it["grads"]):
            term = (p * torch.tensor([decode(v) for v in g], dtype=torch.float64).to(p.dtype)).sum()
            loss = term if loss is None else loss + term
        scaler.scale(loss).backward()
        if it["unscale_first"]:
            scaler.unscale_(opt)
        before = len(steps)
        scaler.step(opt)
        scaler.update(it["new_scale"])
        trajectory.append({"scale": scaler.get_scale(), "growth_tracker": scaler._get_growth_tracker(),
                           "stepped": len(steps) > before})
    return {"trajectory": trajectory, "params": [[encode(v) for v in p.detach().double().tolist()] for p in params],
            "state_dict": scaler.state_dict()}


def assert_same(cpp, py):
    assert len(cpp["trajectory"]) == len(py["trajectory"])
    for i, (c, p) in enumerate(zip(cpp["trajectory"], py["trajectory"])):
        assert c == p, f"iteration {i}: C++ {c} vs Python {p}"
    for c, p in zip(cpp["params"], py["params"]):
        torch.testing.assert_close(torch.tensor([decode(v) for v in c], dtype=torch.float64),
                                   torch.tensor([decode(v) for v in p], dtype=torch.float64),
                                   rtol=0, atol=0, equal_nan=True)
    assert cpp["state_dict"] == py["state_dict"]


CASES = {
    # random gradients, planted inf/NaN, huge values, explicit unscale_, a manual new scale
    "random_interval3": (sequence(1, 60, new_scale_at={30}), {"growth_interval": 3}),
    "random_defaults": (sequence(2, 40), {}),
    "factors_3_and_quarter": (sequence(3, 50), {"growth_factor": 3.0, "backoff_factor": 0.25,
                                                 "growth_interval": 2, "init_scale": 8.0}),
    # growth every step until the scaled gradients overflow float32, then back off, again
    "interval1_to_overflow": (sequence(4, 300, p_bad=0, p_huge=0), {"growth_interval": 1,
                                                                   "init_scale": 1.0}),
    # a long clean run: the default interval of 2000 grows the scale once
    "long_clean_run": (sequence(5, 2005, shapes=(2,), p_bad=0, p_huge=0, p_unscale=0), {}),
    # disabled: passes through, steps even on inf (the parameters go non-finite)
    "disabled": (sequence(6, 20, p_bad=0.5), {"enabled": False}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpp_trajectory_equals_pythons(name, tmp_path):
    iterations, options = CASES[name]
    dtypes = ("float32",) if len(iterations[0]["grads"]) == 1 else ("float32", "float64")
    spec = case(iterations, options, dtypes=dtypes)
    cpp, py = run_cpp(spec, tmp_path), run_python(spec)
    assert_same(cpp, py)
    if name == "random_interval3":  # the sequence really exercises what it is meant to
        t = py["trajectory"]
        assert any(not p["stepped"] for p in t) and any(p["stepped"] for p in t)
        assert any(b["scale"] > a["scale"] for a, b in zip(t, t[1:]))
    if name == "long_clean_run":
        assert py["trajectory"][-1]["scale"] == 2.0 ** 17


def halves(seed, n=40):
    its = sequence(seed, n)
    return its[: n // 2], its[n // 2:]


def test_python_state_into_cpp_continues_like_python(tmp_path):
    first, second = halves(11)
    options = {"growth_interval": 3, "init_scale": 1024.0}
    py_first = run_python(case(first, options, momentum=0.0))
    py_full = run_python(case(first + second, options, momentum=0.0))
    cont = case(second, {}, momentum=0.0, load_state=py_first["state_dict"])
    cont["params"] = [dict(p, values=v) for p, v in zip(cont["params"], py_first["params"])]
    cpp_rest = run_cpp(cont, tmp_path)
    assert_same(cpp_rest, {"trajectory": py_full["trajectory"][len(first):],
                           "params": py_full["params"], "state_dict": py_full["state_dict"]})


def test_cpp_state_into_python_continues_like_cpp(tmp_path):
    first, second = halves(12)
    options = {"growth_interval": 4, "init_scale": 2.0 ** 20, "growth_factor": 4.0}
    cpp_first = run_cpp(case(first, options, momentum=0.0), tmp_path)
    cpp_full = run_cpp(case(first + second, options, momentum=0.0), tmp_path)
    assert set(cpp_first["state_dict"]) == set(torch.amp.GradScaler("cpu").state_dict())
    cont = case(second, {}, momentum=0.0, load_state=cpp_first["state_dict"])
    cont["params"] = [dict(p, values=v) for p, v in zip(cont["params"], cpp_first["params"])]
    py_rest = run_python(cont)
    assert_same(py_rest, {"trajectory": cpp_full["trajectory"][len(first):],
                          "params": cpp_full["params"], "state_dict": cpp_full["state_dict"]})
    # the checkpoint is taken after both backoffs and growths
    t = cpp_first["trajectory"]
    assert any(not p["stepped"] for p in t)
    assert any(b["scale"] > a["scale"] for a, b in zip(t, t[1:]))


def test_cpu_demo_with_scaler_records_every_update(cli, tmp_path):
    """The demo's GradScaler path (the one `--device cuda` takes) on the CPU: one loss-scale entry
    per step, halving exactly on the steps with inf/NaN gradients, which begin with the planted
    overflow of blocks.1.ffn.wo; its steps are the ones skipped."""
    steps = 8
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--scaler", "--steps", steps,
              "--out", tmp_path)
    assert res.returncode == 0, res.stderr
    assert "with GradScaler" in res.stdout
    r = json.loads((tmp_path / "report.json").read_text())
    ls = r["loss_scale"]
    assert [p["step"] for p in ls] == list(range(steps))
    scale = 65536.0
    for p in ls:  # growth_interval 2000: only backoffs within 8 steps
        scale = scale * 0.5 if p["found_inf"] else scale
        assert p["scale"] == scale
    found = [p["step"] for p in ls if p["found_inf"]]
    assert found and found[0] == r["first_nonfinite"]["step"] == steps // 2
    assert r["first_nonfinite"]["layer"] == "blocks.1.ffn.wo"
    skipped = [i for i, line in enumerate(l for l in res.stdout.splitlines() if l.startswith("step "))
               if "optimizer step skipped" in line]
    assert skipped == found
    assert f"loss scale: 65536 -> {scale:g} over {steps} updates, {len(found)} with inf/NaN" in res.stdout
    assert r["run"]["steps"] == steps


@pytest.mark.gpu
def test_pythons_cuda_gradscaler_updates_are_all_recorded():
    """torch.amp.GradScaler('cuda') under the profiler: its updates are device tensors, copied
    on the stream and read back in batches (more updates than are kept pending), all in order."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import ampscope
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", init_scale=1024.0, growth_interval=4)
    x = torch.randn(4, 16, device="cuda")
    scales, infs = [], []
    with ampscope.profile(model=model, out=None) as prof:
        for i in range(70):
            with torch.autocast("cuda", torch.float16):
                loss = model(x).float().pow(2).mean()
            if i % 9 == 2:
                loss = loss * math.inf
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            infs.append(i % 9 == 2)
    ls = prof.report["loss_scale"]
    assert [p["step"] for p in ls] == list(range(70))
    assert [p["scale"] for p in ls] == scales
    assert [p["found_inf"] for p in ls] == infs
