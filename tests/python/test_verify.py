"""ampscope verify: two runs of one command, without and with a precision map."""
import json
import sys
import textwrap

import pytest

from conftest import BUILD

SCRIPT = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 2))
    with torch.no_grad():
        m[0].weight.mul_(1e5)  # layer "0" overflows float16 from the first step
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.float16):
            out = m(torch.randn(4, 8))
        out.float().sum().backward()
        opt.step()
        opt.zero_grad()
""")


def test_verify_a_python_script(cli, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    first = tmp_path / "first"
    res = cli("run", "--out", first, "--", sys.executable, script)
    assert res.returncode == 0, res.stderr
    pmap = json.loads((first / "precision_map.json").read_text())
    assert pmap["pin_fp32"] == ["0"]

    out = tmp_path / "verify"
    res = cli("verify", "--map", first / "precision_map.json", "--out", out, "--fail-on-nonfinite",
              "--", sys.executable, script)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[1/2] baseline run" in res.stdout and "[2/2] run with" in res.stdout
    assert "non-finite: gone" in res.stdout
    assert "gone        critical  pin_fp32" in res.stdout
    before = json.loads((out / "baseline" / "report.json").read_text())
    after = json.loads((out / "pinned" / "report.json").read_text())
    assert before["first_nonfinite"]["layer"] == "0" and after["first_nonfinite"] is None
    pinned = next(l for l in after["layers"] if l["name"] == "0")
    assert {o["compute_dtype"] for o in pinned["ops"] if o["op"] == "aten::linear"} == {"float32"}
    assert (out / "verify.txt").read_text() in res.stdout


def test_verify_the_demo_with_its_own_map(cli, tmp_path):
    first = tmp_path / "first"
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--steps", "8", "--quiet", "--out", first)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "verify"
    res = cli("verify", "--map", first / "precision_map.json", "--out", out, "--",
              BUILD / "bin" / "ampscope", "demo", "--device", "cpu", "--dtype", "float16", "--steps", "8")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "non-finite: gone" in res.stdout
    assert "no longer needed: blocks.1.ffn.wo" in res.stdout
    assert "time per step:" in res.stdout


def test_verify_the_demo_by_its_bare_name(cli, tmp_path):
    # `verify -- ampscope demo` as its --help shows it, with no ampscope on PATH: this ampscope.
    first = tmp_path / "first"
    assert cli("demo", "--dtype", "float16", "--steps", "8", "--quiet", "--out", first).returncode == 0
    res = cli("verify", "--map", first / "precision_map.json", "--out", tmp_path / "v", "--",
              "ampscope", "demo", "--dtype", "float16", "--steps", "8")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "non-finite: gone" in res.stdout


def test_verify_passes_on_a_failing_run_with_the_map(cli, tmp_path):
    # The run with the map exits 5: whatever its report says, nothing is verified.
    script = tmp_path / "train.py"
    script.write_text(SCRIPT + "import os, sys\nsys.exit(5 if os.environ.get('AMPSCOPE_PRECISION_MAP') else 0)\n")
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schema": "ampscope.precision_map/1", "pin_fp32": [], "why": {}}))
    res = cli("verify", "--map", empty, "--out", tmp_path / "v", "--", sys.executable, script)
    assert res.returncode == 5, res.stdout + res.stderr
    assert "not verified" in res.stderr


def test_verify_still_failing_exits_3_with_fail_on_nonfinite(cli, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"schema": "ampscope.precision_map/1", "pin_fp32": [], "why": {}}))
    res = cli("verify", "--map", empty, "--out", tmp_path / "v", "--fail-on-nonfinite", "--",
              sys.executable, script)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "STILL THERE critical  pin_fp32" in res.stdout


@pytest.mark.parametrize("args", [
    ["verify"],                                       # no --map
    ["verify", "--map", "/no/such/map.json", "--", "true"],
    ["verify", "--map", "MAP"],                       # no command
    ["verify", "--map", "MAP", "--", "/no/such/program"],
])
def test_verify_bad_usage(cli, tmp_path, args):
    m = tmp_path / "map.json"
    m.write_text(json.dumps({"schema": "ampscope.precision_map/1", "pin_fp32": [], "why": {}}))
    res = cli(*[str(m) if a == "MAP" else a for a in args])
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("ampscope: error: ") and "Traceback" not in res.stderr
