"""ampscope fix: run -> pin -> re-run until clean, then minimise; every candidate a real run.

Oracles: the runs' own reports (which layer each run saw go non-finite first) and an
independent re-run of the script with the final map through `python -m ampscope --map`."""
import json
import re
import sys
import textwrap

import pytest

from conftest import BUILD

# Two planted culprits: `up` passes float16's max at step 2; `mid` would pass it at step 4,
# which a run only reaches once `up` is pinned (the run stops at up's inf before). `head` is
# benign. Weights are set each step, so the values do not depend on training.
PLANTED = textwrap.dedent("""
    import sys, torch
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)
            self.mid = torch.nn.Linear(8, 8)
            self.norm2 = torch.nn.LayerNorm(8)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.norm2(self.mid(self.norm(self.up(x)))))

    m = Net()
    if "strict" in sys.argv:  # a script that breaks when mid runs in float32
        def expect_half(mod, args, out):
            assert out.dtype == torch.float16, "mid must return float16"
        m.mid.register_forward_hook(expect_half)
    with torch.no_grad():
        m.up.bias.zero_()
        m.mid.bias.zero_()
        m.norm.weight.fill_(256.0)
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    x = torch.linspace(0.5, 1.0, 8).repeat(4, 1) * 256
    for step in range(6):
        with torch.no_grad():  # up's largest output is 2^(step+14), mid's 392 * 2^(step+4)
            m.up.weight.copy_(torch.eye(8) * 2.0 ** (step + 6))
            m.mid.weight.copy_(torch.eye(8) * 2.0 ** (step + 4))
        with torch.autocast("cpu", dtype=torch.float16):
            out = m(x)
        out.float().sum().backward()
        opt.step()
        opt.zero_grad()
""")

# A model bug: log(0) is -inf in float32 too, so no pin can fix it.
LOG_BUG = textwrap.dedent("""
    import torch
    torch.manual_seed(0)

    class LogProb(torch.nn.Module):
        def forward(self, x):
            return torch.log(torch.relu(x) * 0.0)

    m = torch.nn.Sequential(torch.nn.Linear(8, 8), LogProb(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.float16):
            out = m(torch.randn(4, 8))
        out.float().sum().backward()
        opt.step()
        opt.zero_grad()
""")


# A Hugging Face T5 (random init from a config) with T5's wo drift planted twice: the encoder's
# FFN wo passes float16's max at step 2, the decoder's at step 4 (reached only once the first
# is pinned). T5's own log(0) in its position bucketing is benign and must not get in the way.
T5_TWO = textwrap.dedent("""
    import math, torch, transformers
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=120, d_model=32, d_ff=64, num_layers=2, num_heads=4,
                                d_kv=8, decoder_start_token_id=0, dropout_rate=0.0)
    model = transformers.T5ForConditionalGeneration(cfg)
    ENC_WO = model.encoder.block[0].layer[1].DenseReluDense.wo
    DEC_WO = model.decoder.block[1].layer[2].DenseReluDense.wo
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 120, (2, 10), generator=g)
    labels = torch.randint(1, 120, (2, 6), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    seen = {}
    for wo in (ENC_WO, DEC_WO):
        wo.register_forward_hook(lambda m, a, out: seen.__setitem__(m, out.float().abs().max().item()))
    for step in range(6):
        for wo, at in ((ENC_WO, 2), (DEC_WO, 4)):
            if step == at:  # 1.5 x float16's max from this step on
                with torch.no_grad():
                    model(input_ids=ids, labels=labels)
                    wo.weight.mul_(1.5 * 65504 / seen[wo])
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        print("loss", step, loss.item(), flush=True)
        if math.isfinite(loss.item()):
            opt.step()
        else:
            import ampscope; ampscope.step()
""")
ENC_WO = "encoder.block.0.layer.1.DenseReluDense.wo"
DEC_WO = "decoder.block.1.layer.2.DenseReluDense.wo"


def losses(run_dir):
    """The script's own loss per step, as torch computed it (from the run's log)."""
    return [float(l.split()[2]) for l in (run_dir / "log.txt").read_text().splitlines()
            if l.startswith("loss ")]


def write_map(path, pins):
    path.write_text(json.dumps({"schema": "ampscope.precision_map/1", "pin_fp32": pins,
                                "why": {p: ["overflow_float16"] for p in pins}}))
    return path


def report(path):
    return json.loads((path / "report.json").read_text())


def first_layer(rep):
    return rep["first_nonfinite"] and rep["first_nonfinite"]["layer"]


def pin_recs(rep):
    return [r["layer"] for r in rep["recommendations"] if r["action"] == "pin_fp32"]


def test_fix_finds_both_culprits_and_drops_a_redundant_start_pin(cli, run_py, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PLANTED)
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--map", write_map(tmp_path / "start.json", ["head"]), "--",
              sys.executable, script)
    assert res.returncode == 0, res.stdout + res.stderr
    pmap = json.loads((out / "precision_map.json").read_text())
    assert pmap["schema"] == "ampscope.precision_map/1"
    assert pmap["pin_fp32"] == ["up", "mid"]
    assert set(pmap["why"]) == {"up", "mid"} and "nonfinite_origin" in pmap["why"]["mid"]

    # Each pin's evidence: the run that added it saw that layer go non-finite first, and the
    # run without it (a real run with the other pins) saw it come back.
    for layer in ("up", "mid"):
        ev = pmap["evidence"][layer]
        assert first_layer(report(out / ev["added_by"]["run"])) == layer
        needed = ev["needed"]
        assert layer not in needed["pins"] and needed["first_nonfinite"]["layer"] == layer
    runs = sorted((out / "runs").iterdir())
    applied = [json.loads((r / "applied_map.json").read_text())["pin_fp32"]
               if (r / "applied_map.json").exists() else [] for r in runs]
    assert len({frozenset(a) for a in applied}) == len(applied)   # no map run twice
    assert first_layer(report(runs[0])) == "up"            # the baseline, no pins
    mid_first = [r for r, a in zip(runs, applied) if "up" in a and "mid" not in a]
    assert mid_first and all(first_layer(report(r)) == "mid" for r in mid_first)
    assert ["up", "mid"] in applied and any(set(a) == {"up", "mid", "head"} for a in applied)
    assert res.stderr.count("ampscope fix: run ") == len(runs)   # a progress line per run

    text = (out / "fix.txt").read_text()
    assert text in res.stdout and "clean with 2 pins" in text
    assert "head  (from the starting map; run" in text and "loss_scaling" in text
    assert "time per step:" in text and "up  aten::linear: float16 -> float32" in text

    # Independent re-run with the final map: clean.
    rerun = tmp_path / "rerun"
    res = run_py("-m", "ampscope", "--out", rerun, "--map", out / "precision_map.json", script)
    assert res.returncode == 0, res.stderr
    rep = report(rerun)
    assert rep["first_nonfinite"] is None and pin_recs(rep) == []


def test_fix_a_real_t5_with_two_planted_overflows(cli, tmp_path):
    import math
    pytest.importorskip("transformers")
    script = tmp_path / "train_t5.py"
    script.write_text(T5_TWO)
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--", sys.executable, script)
    assert res.returncode == 0, res.stdout + res.stderr
    pmap = json.loads((out / "precision_map.json").read_text())
    assert pmap["pin_fp32"] == [ENC_WO, DEC_WO]
    base = out / "runs" / "01-baseline"
    assert first_layer(report(base)) == ENC_WO
    assert not math.isfinite(losses(base)[2])                 # torch agrees: step 2 went inf
    final = sorted((out / "runs").glob("03-*"))[0]              # round 3: both pinned
    assert json.loads((final / "applied_map.json").read_text())["pin_fp32"] == [ENC_WO, DEC_WO]
    assert len(losses(final)) == 6 and all(map(math.isfinite, losses(final)))
    assert first_layer(report(out / pmap["evidence"][DEC_WO]["added_by"]["run"])) == DEC_WO


def test_fix_max_rounds_reached_exits_3_with_the_pins_it_tested(cli, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PLANTED)
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--max-rounds", "2", "--", sys.executable, script)
    assert res.returncode == 3, res.stdout + res.stderr
    assert json.loads((out / "precision_map.json").read_text())["pin_fp32"] == ["up"]
    assert "--max-rounds reached" in res.stdout
    assert "non-finite at step 4 in mid" in res.stdout


def test_fix_a_pin_that_breaks_the_script_is_no_fix(cli, tmp_path):
    # With up and mid pinned the script raises before any NaN: that run is not clean.
    script = tmp_path / "train.py"
    script.write_text(PLANTED)
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--", sys.executable, script, "strict")
    assert res.returncode == 3, res.stdout + res.stderr
    last = sorted((out / "runs").iterdir())[-1]
    assert json.loads((last / "applied_map.json").read_text())["pin_fp32"] == ["up", "mid"]
    assert report(last)["first_nonfinite"] is None              # looks clean, but it raised
    assert "mid must return float16" in (last / "log.txt").read_text()
    assert "the command failed with the map (exit code 1" in res.stdout
    # what remains and the cost of the map say the run stopped short (not "nothing remains")
    remains = res.stdout.split("what remains")[1].split("cost of the map")[0]
    assert "the run failed (exit code 1)" in remains and "nothing: no recommendation" not in remains
    assert "failed, exit code 1: it is compared as far as it ran" in res.stdout


def test_fix_a_model_bug_exits_3_with_fix_model_and_no_pins(cli, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOG_BUG)
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--", sys.executable, script)
    assert res.returncode == 3, res.stdout + res.stderr
    pmap = json.loads((out / "precision_map.json").read_text())
    assert pmap["pin_fp32"] == []
    base = report(out / "runs" / "01-baseline")
    assert base["first_nonfinite"]["layer"] == "1" and base["first_nonfinite"]["op"] == "aten::log"
    assert [(r["layer"], r["action"]) for r in base["recommendations"]
            if r["action"] in ("pin_fp32", "fix_model")] == [("1", "fix_model")]
    assert "fix_model" in res.stdout and "NOT clean" in res.stdout


def test_fix_the_demo_pins_its_wo_alone(cli, tmp_path):
    out = tmp_path / "fix"
    demo = [BUILD / "bin" / "ampscope", "demo", "--device", "cpu", "--dtype", "float16"]
    res = cli("fix", "--out", out, "--", *demo)
    assert res.returncode == 0, res.stdout + res.stderr
    pmap = json.loads((out / "precision_map.json").read_text())
    assert pmap["pin_fp32"] == ["blocks.1.ffn.wo"]
    assert report(out / "runs" / "01-baseline")["first_nonfinite"]["layer"] == "blocks.1.ffn.wo"
    rerun = tmp_path / "rerun"
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--quiet", "--out", rerun,
              "--map", out / "precision_map.json")
    assert res.returncode == 0, res.stderr
    assert report(rerun)["first_nonfinite"] is None and pin_recs(report(rerun)) == []


def test_fix_minimises_a_large_starting_map_by_halves(cli, tmp_path):
    # 11 pins, one of them needed: more than 8, so by halves, in fewer runs than one at a time.
    start = [f"blocks.{b}.{l}" for b in (0, 1) for l in ("attn.qkv", "attn.proj", "ffn.wi", "ffn.wo")]
    start += ["head", "ln_f", "blocks.0.ln1"]
    out = tmp_path / "fix"
    demo = [BUILD / "bin" / "ampscope", "demo", "--device", "cpu", "--dtype", "float16", "--steps", "14"]
    res = cli("fix", "--out", out, "--map", write_map(tmp_path / "start.json", start), "--", *demo)
    assert res.returncode == 0, res.stdout + res.stderr
    pmap = json.loads((out / "precision_map.json").read_text())
    assert pmap["pin_fp32"] == ["blocks.1.ffn.wo"]
    needed = pmap["evidence"]["blocks.1.ffn.wo"]["needed"]
    assert "blocks.1.ffn.wo" not in needed["pins"]
    assert needed["first_nonfinite"]["layer"] == "blocks.1.ffn.wo"
    runs = sorted((out / "runs").iterdir())
    assert len(runs) < 2 + len(start)                      # baseline, round 1, 11 removals
    assert any(re.search(r"without-\d+-pins$", r.name) for r in runs)   # halves went at once
    for r in runs:                                          # every candidate is a real run
        a = r / "applied_map.json"
        pins = json.loads(a.read_text())["pin_fp32"] if a.exists() else []
        rep = report(r)
        if "blocks.1.ffn.wo" in pins:
            assert rep["first_nonfinite"] is None, r.name
        else:
            assert first_layer(rep) == "blocks.1.ffn.wo", r.name


def test_fix_a_libtorch_program_runs_to_the_end(cli, tmp_path):
    # Its overflow lands in "<outside>", which is no module: nothing to pin, exit 3.
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--", BUILD / "bin" / "ampscope-example-plain")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "cannot be stopped at its first NaN/Inf" in res.stderr
    assert report(out / "runs" / "01-baseline")["first_nonfinite"]["layer"] == "<outside>"
    assert json.loads((out / "precision_map.json").read_text())["pin_fp32"] == []


# A tanh-approximated GELU whose pow overflows float16 in forward (tanh(inf) = 1: the output
# stays finite) and makes 0 * inf = NaN in backward, from step 2 on.
GELU_BACKWARD = textwrap.dedent("""
    import math, torch
    torch.manual_seed(0)

    class Act(torch.nn.Module):
        def forward(self, x):
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
            return 0.5 * x * (1.0 + torch.tanh(inner))

    m = torch.nn.Sequential(torch.nn.Linear(8, 8), Act(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    for step in range(4):
        with torch.no_grad():
            m[0].weight.copy_(torch.eye(8) * (1.0 if step < 2 else 200.0))
            m[0].bias.zero_()
        with torch.autocast("cpu", dtype=torch.float16):
            out = m(torch.ones(4, 8))
        out.float().sum().backward()
        print("grads finite", step, all(bool(p.grad.isfinite().all()) for p in m.parameters()))
        opt.step()
        opt.zero_grad()
""")


def test_fix_with_every_reruns_an_origin_its_unrecorded_step_hid(cli, run_py, tmp_path):
    # Step 2 is not recorded with --every 4: the watch sees NaN gradients but not their maker.
    # The run is repeated recording every step, which names PowBackward0 in layer 1.
    script = tmp_path / "train.py"
    script.write_text(GELU_BACKWARD)
    out = tmp_path / "fix"
    res = cli("fix", "--out", out, "--every", "4", "--", sys.executable, script)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "once more, recording every step" in res.stderr
    watched = report(out / "runs" / "01-baseline")
    assert [r["reasons"] for r in watched["recommendations"] if r["action"] == "watch"] == [
        ["nonfinite_origin_unobserved"]]
    recorded = report(out / "runs" / "01-baseline-every-step")
    e = recorded["first_nonfinite"]
    assert (e["step"], e["layer"], e["op"], e["phase"]) == (2, "1", "PowBackward0", "backward")
    assert json.loads((out / "precision_map.json").read_text())["pin_fp32"] == ["1"]
    # oracle: the script itself reports NaN gradients from step 2, and finite ones with the map
    plain = run_py(script)
    assert "grads finite 1 True" in plain.stdout and "grads finite 2 False" in plain.stdout
    res2 = run_py("-m", "ampscope", "--out", tmp_path / "check", "--map",
                  out / "precision_map.json", script)
    assert res2.returncode == 0, res2.stderr
    assert res2.stdout.count("grads finite") == 4 and "False" not in res2.stdout, res2.stdout


def test_fix_says_when_the_baseline_could_show_nothing(cli, tmp_path):
    # No model trained, nothing in low precision: "clean", but with notes saying why.
    script = tmp_path / "idle.py"
    script.write_text("import torch\nprint(torch.ones(3).sum().item())\n")
    res = cli("fix", "--out", tmp_path / "fix", "--", sys.executable, script)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "completed no training step" in res.stdout
    assert "no op of the baseline computed in a low-precision dtype" in res.stdout


def test_fix_a_script_that_fails_by_itself_says_so(cli, tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import torch\ntorch.ones(2).sum()\nraise ValueError('no data found')\n")
    res = cli("fix", "--out", tmp_path / "fix", "--", sys.executable, script)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "the command failed without pins (exit code 1: \"ValueError: no data found\"" in res.stdout


@pytest.mark.parametrize("args", [
    ["fix"],                                              # no command
    ["fix", "--", ],
    ["fix", "--max-rounds", "0", "--", "true"],
    ["fix", "--map", "/no/such/map.json", "--", "true"],
    ["fix", "--bogus", "--", "true"],
    ["fix", "--out", "OUT", "--", "/no/such/program"],
    ["fix", "--out", "OUT", "--", sys.executable, "/no/such/script.py"],
])
def test_fix_bad_usage(cli, tmp_path, args):
    res = cli(*[str(tmp_path / "o") if a == "OUT" else a for a in args])
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [l for l in res.stderr.splitlines() if l.startswith("ampscope: error: ")]
    assert len(lines) == 1 and "Traceback" not in res.stderr


def test_fix_help_answers_the_questions(cli):
    res = cli("fix", "--help")
    assert res.returncode == 0
    for words in ("--max-rounds", "--map", "minimis", "precision_map.json", "fix.txt",
                  "AMPSCOPE_PRECISION_MAP", "fix_model", "exit codes"):
        assert words in res.stdout, words


def test_fix_interrupted_writes_the_smallest_clean_map_so_far(tmp_path):
    import os
    import signal
    import subprocess
    import time
    script = tmp_path / "train.py"
    script.write_text(PLANTED)
    out = tmp_path / "fix"
    proc = subprocess.Popen([str(BUILD / "bin" / "ampscope"), "fix", "--out", str(out), "--",
                             sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # Runs 1-3: baseline, +up, +up+mid (clean). Run 4 is the first minimisation candidate.
    deadline = time.time() + 120
    while not list((out / "runs").glob("04-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert "ampscope: error" not in stderr
    pmap = json.loads((out / "precision_map.json").read_text())
    assert sorted(pmap["pin_fp32"]) == ["mid", "up"]          # run 3's map, known clean
    assert "INTERRUPTED" in (out / "fix.txt").read_text()
    assert not list((out / "runs").glob("05-*"))              # nothing ran after the signal
