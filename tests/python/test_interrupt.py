"""The report survives: signals at seeded random moments (during training and while the report
is built), SIGPIPE, concurrent runs into one --out, forked children, unwritable or full --out,
and a script's own profile() under python -m ampscope. Oracles: the files on disk (readable
JSON of schema ampscope.report/1, an HTML page of the same run, no temp or lock files left), the
exit codes a shell expects (130 / 143), and the step counts the script itself printed."""
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BUILD, PYPKG

TRAIN = """
import sys, time, torch
steps = int(sys.argv[1])
m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
print("started", flush=True)
for step in range(steps):
    m(torch.randn(16, 64)).sum().backward()
    opt.step()
    opt.zero_grad()
    print("step", step, flush=True)
    time.sleep(0.02)
print("done", flush=True)
"""


def env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(PYPKG), os.environ.get("PYTHONPATH", "")]))


def start(tmp_path, out, *script_args, script=TRAIN, extra=()):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.Popen([sys.executable, "-m", "ampscope", "--out", str(out), *extra, str(path),
                             *map(str, script_args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env())


def wait_for(proc, word):
    for line in proc.stdout:
        if line.split()[:1] == [word]:
            return line
    raise AssertionError(f"never printed {word!r}: {proc.stderr.read()[-2000:]}")


def assert_one_consistent_report(out):
    """report.json readable, report.html of the same run, nothing half-written left."""
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "ampscope.report/1"
    html = (out / "report.html").read_text()
    assert html.rstrip().endswith("</html>")
    # (set-level consistency under SIGKILL is tested in tests/test_out_dir.cpp)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], list(out.iterdir())
    return report


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_at_random_moments_keep_a_report_and_the_exit_code(tmp_path, sig):
    rng = random.Random(15 + sig)
    out = tmp_path / "out"
    for trial in range(3):
        proc = start(tmp_path, out, 40)
        wait_for(proc, "started")
        after_done = trial == 2  # the report is being built when the signal lands
        if after_done:
            wait_for(proc, "done")
            time.sleep(rng.uniform(0.0, 0.15))
        else:
            time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        # Python re-raises SIGINT for an unhandled KeyboardInterrupt (the shell sees 130).
        expected = {signal.SIGINT: (-signal.SIGINT, 130), signal.SIGTERM: (143,)}[sig]
        # After the report is written and --out released, a signal can also land in Python's
        # own teardown (it restores the default handlers): death by the signal, which a shell
        # reports as 128+sig too; or after the process is gone (0).
        late = (0, -sig) if "ampscope: wrote" in err else ()
        assert proc.returncode in expected or (after_done and proc.returncode in late), (
            trial, proc.returncode, err[-1500:])
        report = assert_one_consistent_report(out)
        if not after_done:
            assert report["run"]["stopped"] == "signal"


def test_second_signal_while_writing_is_handled_once(tmp_path):
    out = tmp_path / "out"
    proc = start(tmp_path, out, 3)
    wait_for(proc, "done")
    for _ in range(3):
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.01)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 143) or (proc.returncode == -signal.SIGTERM and
                                           "ampscope: wrote" in err), err  # see above
    assert_one_consistent_report(out)


def test_cli_demo_signal_exit_code_and_sigpipe(tmp_path):
    exe = str(BUILD / "bin" / "ampscope")
    out = tmp_path / "demo"
    proc = subprocess.Popen([exe, "demo", "--steps", "200", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(proc, "step")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode == 143
    assert assert_one_consistent_report(out)["run"]["stopped"] == "signal"
    # `ampscope demo | head -1`: the reader goes away, the run still ends with its report.
    out2 = tmp_path / "pipe"
    proc = subprocess.Popen([exe, "demo", "--steps", "6", "--out", str(out2)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    proc.wait(timeout=120)
    assert proc.returncode == 0, proc.stderr.read()
    assert assert_one_consistent_report(out2)["run"]["steps"] == 6


def test_python_broken_pipe_keeps_the_report(tmp_path):
    out = tmp_path / "out"
    proc = start(tmp_path, out, 200)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    assert proc.returncode == 141, err
    assert "Traceback" not in err
    assert_one_consistent_report(out)


HOLD = """
import os, sys, time, torch
m = torch.nn.Linear(8, 8)
print("started", flush=True)
steps = 0
while not os.path.exists(sys.argv[1]):  # holds --out until the test has tried the others
    m(torch.randn(2, 8)).sum().backward()
    steps += 1
    time.sleep(0.01)
print("steps", steps, flush=True)
"""


def test_concurrent_runs_into_one_out_refuse_the_second(tmp_path, cli):
    out, release = tmp_path / "out", tmp_path / "release"
    first = start(tmp_path, out, release, script=HOLD)
    wait_for(first, "started")
    res = subprocess.run([sys.executable, "-m", "ampscope", "--out", str(out), str(tmp_path / "train.py"), "1"],
                         capture_output=True, text=True, env=env(), timeout=120)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert f"--out {out} is in use by another ampscope run (pid {first.pid})" in res.stderr
    demo = cli("demo", "--steps", "1", "--out", out)
    assert demo.returncode == 2 and "in use by another ampscope run" in demo.stderr
    release.touch()
    stdout, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    report = assert_one_consistent_report(out)
    assert report["run"]["command"].endswith(str(release))  # the first run's report, not another's


@pytest.mark.parametrize("how", ["unwritable", "full"])
def test_unusable_out_is_found_at_start_up(tmp_path, cli, run_py, how):
    extra_env = {"AMPSCOPE_MIN_FREE_BYTES": str(2 ** 62)} if how == "full" else {}
    out = "/proc/ampscope-out" if how == "unwritable" else str(tmp_path / "out")
    script = tmp_path / "s.py"
    script.write_text("print('ran')\n")
    e = dict(env(), **extra_env)
    runs = [subprocess.run([sys.executable, "-m", "ampscope", "--out", out, str(script)],
                           capture_output=True, text=True, env=e, timeout=120),
            subprocess.run([str(BUILD / "bin" / "ampscope"), "demo", "--out", out],
                           capture_output=True, text=True, env=e, timeout=120),
            subprocess.run([str(BUILD / "bin" / "ampscope"), "run", "--out", out, "--",
                            sys.executable, str(script)], capture_output=True, text=True, env=e,
                           timeout=120)]
    for res in runs:
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"ampscope: error: --out {out}") and res.stderr.count("\n") == 1, res.stderr
        assert "ran" not in res.stdout and "steps on" not in res.stdout  # found before running


FORK = """
import os, sys, torch
m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
def step():
    m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
step()
pid = os.fork()
if pid == 0:
    step()
    sys.exit(0)          # the child ends through the profile's exit too
os.waitpid(pid, 0)
for _ in range(4):
    step()
print("parent steps", 5)
"""


def test_forked_child_never_writes_over_the_parent(tmp_path):
    out = tmp_path / "out"
    proc = start(tmp_path, out, script=FORK)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "parent steps 5" in stdout
    assert assert_one_consistent_report(out)["run"]["steps"] == 5  # not the child's 2


JOIN = """
import ampscope, torch
m = torch.nn.Linear(4, 4)
with ampscope.profile(model=m, out="own-out") as prof:
    m(torch.randn(2, 4)).sum().backward()
    ampscope.step()
print("joined", prof.joined is not None, prof.report["run"]["steps"])
"""


def test_scripts_own_profile_joins_the_active_session(tmp_path):
    out = tmp_path / "out"
    proc = start(tmp_path, out, script=JOIN)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "joined True 1" in stdout
    report = assert_one_consistent_report(out)
    assert report["run"]["steps"] == 1
    assert any(l["ops"] for l in report["layers"] if l["name"] == "")
