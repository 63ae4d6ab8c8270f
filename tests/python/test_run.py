"""ampscope run: a LibTorch program through LD_PRELOAD, a Python script through -m ampscope."""
import json
import textwrap

import pytest


def test_run_profiles_an_unmodified_libtorch_program(cli, tmp_path):
    from conftest import BUILD
    out = tmp_path / "out"
    res = cli("run", "--out", out, "--", BUILD / "bin" / "ampscope-example-plain")
    assert res.returncode == 0, res.stderr
    assert "max inf" in res.stdout
    report = json.loads((out / "report.json").read_text())
    first = report["first_nonfinite"]
    assert first["op"] == "aten::mm" and first["layer"] == "<outside>"
    assert first["inputs_finite"] is True and first["fp32_also_nonfinite"] is False


def test_run_python_script_and_exit_code(cli, tmp_path):
    import sys
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import sys, torch
        torch.nn.Linear(2, 2)(torch.randn(1, 2))
        sys.exit(4)
    """))
    out = tmp_path / "out"
    res = cli("run", "--out", out, "--", sys.executable, script)
    assert res.returncode == 4, res.stderr
    report = json.loads((out / "report.json").read_text())
    assert any(l["name"] == "" and l["type"] == "Linear" for l in report["layers"])


def test_run_keeps_the_interpreters_own_options(cli, tmp_path):
    import sys
    script = tmp_path / "s.py"
    script.write_text("import sys, torch\ntorch.nn.Linear(2, 2)(torch.randn(1, 2))\n"
                      "print('flags', sys.flags.optimize, sys.flags.dev_mode, sys.argv[1:])\n")
    out = tmp_path / "out"
    res = cli("run", "--out", out, "--", sys.executable, "-O", "-X", "dev", script, "-u")
    assert res.returncode == 0, res.stderr
    assert "flags 1 True ['-u']" in res.stdout  # as `python -O -X dev s.py -u` prints it
    assert (out / "report.json").exists()


@pytest.mark.parametrize("args", [["run"], ["run", "--"], ["run", "--", "/no/such/program"],
                                  ["run", "--", "python3", "-c", "print(1)"],
                                  ["run", "--", "python3", "-m", "json.tool"],
                                  ["run", "--", "python3", "-u"],
                                  ["run", "--out", "", "--", "python3", "s.py"]])
def test_run_bad_usage(cli, args):
    res = cli(*args)
    assert res.returncode == 2 and res.stderr.startswith("ampscope: error: ")


def test_run_passes_shadow_and_stop_on_nonfinite_to_python(cli, tmp_path):
    import sys
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import torch
        m = torch.nn.Linear(4, 4)
        for step in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = m(torch.ones(2, 4))
            if step == 1:
                print(float(torch.log(y.float() * 0 - 1).sum()))  # NaN from finite inputs, read
            torch.optim.SGD(m.parameters(), lr=0.0).step()
        print("finished")
    """))
    out = tmp_path / "out"
    res = cli("run", "--out", out, "--shadow", "--stop-on-nonfinite", "--", sys.executable, script)
    assert res.returncode == 3, res.stderr
    assert "finished" not in res.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["shadow"] is True and report["run"]["stopped"] == "nonfinite"
    [linear] = [o for l in report["layers"] for o in l["ops"] if o["op"] == "aten::linear"]
    assert linear["compute_dtype"] == "bfloat16" and linear["shadow"]["checks"] >= 1


def test_run_stop_on_nonfinite_needs_python(cli, tmp_path):
    res = cli("run", "--stop-on-nonfinite", "--", "true")
    assert res.returncode == 2 and res.stderr.startswith("ampscope: error: ")
