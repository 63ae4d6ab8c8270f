"""python -m ampscope: runs a script like `python script.py` would, and leaves a report however
the script ends."""
import json
import textwrap

SCRIPT = """
import sys
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.fc(x)

def main():
    print("argv", sys.argv[1:], "name", __name__)
    m = Net()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for step in range(10):
        if step == {fail_at}:
            {ending}
        m(torch.randn(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()

if __name__ == "__main__":
    main()
"""


def write_script(tmp_path, fail_at=99, ending="pass"):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(SCRIPT).format(fail_at=fail_at, ending=ending))
    return path


def test_runs_like_python_and_writes_the_report(run_py, tmp_path):
    script = write_script(tmp_path)
    out = tmp_path / "out"
    res = run_py("-m", "ampscope", "--out", out, script, "--lr", "3")
    assert res.returncode == 0, res.stderr
    assert "argv ['--lr', '3'] name __main__" in res.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["steps"] == 10
    assert (out / "report.html").exists() and (out / "precision_map.json").exists()
    assert any(l["name"] == "fc" for l in report["layers"])


def test_a_script_that_raises_keeps_its_traceback_exit_code_and_report(run_py, tmp_path):
    script = write_script(tmp_path, fail_at=3, ending='raise RuntimeError("boom at step 3")')
    out = tmp_path / "out"
    res = run_py("-m", "ampscope", "--out", out, script)
    assert res.returncode == 1
    assert "Traceback" in res.stderr and "RuntimeError: boom at step 3" in res.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["steps"] == 3


def test_the_scripts_arguments_and_traceback_are_as_plain_python_gives_them(run_py, tmp_path):
    # Oracle: the same script run by plain `python script.py ...`.
    script = write_script(tmp_path, fail_at=1, ending='raise RuntimeError("boom")')
    args = ["--", "-u", "--out", "x"]  # the script's own, ampscope's option names included
    plain = run_py(script, *args)
    res = run_py("-m", "ampscope", "--out", tmp_path / "out", script, *args)
    assert res.returncode == plain.returncode == 1
    argv = [line for line in res.stdout.splitlines() if line.startswith("argv")]
    assert argv == [line for line in plain.stdout.splitlines() if line.startswith("argv")]
    assert "argv ['--', '-u', '--out', 'x']" in plain.stdout

    def frames(stderr):
        return [line.strip() for line in stderr.splitlines() if line.strip().startswith("File ")]
    assert frames(res.stderr) == frames(plain.stderr)  # no runpy or ampscope frames


def test_sys_exit_code_is_preserved(run_py, tmp_path):
    script = write_script(tmp_path, fail_at=2, ending="sys.exit(7)")
    out = tmp_path / "out"
    res = run_py("-m", "ampscope", "--out", out, script)
    assert res.returncode == 7
    assert json.loads((out / "report.json").read_text())["run"]["steps"] == 2


def test_map_option_pins_at_start_up(run_py, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            print("dtype", m(torch.randn(2, 4)).dtype)
    """))
    pmap = tmp_path / "map.json"
    pmap.write_text(json.dumps({"schema": "ampscope.precision_map/1", "pin_fp32": ["1"], "why": {}}))
    out = tmp_path / "out"
    res = run_py("-m", "ampscope", "--map", pmap, "--out", out, script)
    assert res.returncode == 0, res.stderr
    assert "dtype torch.float32" in res.stdout
    layers = {l["name"]: l for l in json.loads((out / "report.json").read_text())["layers"]}
    assert [o["compute_dtype"] for o in layers["1"]["ops"] if o["op"] == "aten::linear"] == ["float32"]
    assert [o["compute_dtype"] for o in layers["0"]["ops"] if o["op"] == "aten::linear"] == ["bfloat16"]


def test_env_precision_map_pins_at_start_up(run_py, tmp_path, monkeypatch):
    script = tmp_path / "s.py"
    script.write_text("import torch\nm = torch.nn.Sequential(torch.nn.Linear(4, 4))\n"
                      "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
                      "    print('dtype', m(torch.randn(2, 4)).dtype)\n")
    pmap = tmp_path / "map.json"
    pmap.write_text(json.dumps({"schema": "ampscope.precision_map/1", "pin_fp32": ["0"], "why": {}}))
    monkeypatch.setenv("AMPSCOPE_PRECISION_MAP", str(pmap))
    res = run_py("-m", "ampscope", "--out", tmp_path / "out", script)
    assert res.returncode == 0, res.stderr
    assert "dtype torch.float32" in res.stdout


def test_bad_arguments_are_one_line_and_exit_2(run_py, tmp_path):
    garbage = tmp_path / "bad.json"
    garbage.write_bytes(b"\x00\xff{{")
    script = write_script(tmp_path)
    for args, env in ((["missing_script.py"], {}), (["--every", "0", script], {}),
                      (["--map", garbage, script], {}), (["--map", tmp_path / "none.json", script], {}),
                      (["--bogus", script], {}), ([], {}), (["--out", "", script], {}),
                      ([script], {"AMPSCOPE_SENTINEL": "bogus"})):
        res = run_py("-m", "ampscope", *args, env=env)
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert lines and lines[-1].startswith("ampscope: error: "), (args, res.stderr)
        assert "Traceback" not in res.stderr


import signal
import subprocess
import sys
import time


def test_sigterm_and_sigint_still_leave_a_report(tmp_path):
    from conftest import PYPKG
    import os
    script = tmp_path / "forever.py"
    script.write_text(textwrap.dedent("""
        import torch, sys
        m = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        step = 0
        while True:
            m(torch.randn(2, 4)).sum().backward()
            opt.step(); opt.zero_grad(); step += 1
            if step == 3:
                print("ready", flush=True)
    """))
    env = dict(os.environ, PYTHONPATH=str(PYPKG))
    # The shell sees 143 / 130 either way: ampscope reports, then exits 128 + signal (a SIGINT
    # that lands in Python's own teardown ends it by the signal, as `python script.py` would).
    for sig, codes in ((signal.SIGTERM, (128 + 15,)), (signal.SIGINT, (130, -signal.SIGINT))):
        out = tmp_path / f"out{int(sig)}"
        p = subprocess.Popen([sys.executable, "-m", "ampscope", "--out", str(out), str(script)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        assert p.returncode in codes, err
        report = json.loads((out / "report.json").read_text())
        assert report["run"]["steps"] >= 3
