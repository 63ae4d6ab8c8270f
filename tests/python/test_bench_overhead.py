"""tools/bench/python_overhead.py: its errors and one tiny run (not its figures: those are
measurements, recorded in the README)."""
import json
import subprocess

from conftest import BUILD, ROOT

BENCH = ROOT / "tools" / "bench" / "python_overhead.py"


def test_bad_arguments_are_one_line_errors(run_py):
    r = run_py(BENCH, "--modes", "no such mode")
    assert r.returncode == 2
    assert r.stderr.startswith("ampscope: error:") and "Traceback" not in r.stderr
    r = run_py(BENCH, "--dtypes", "float8")
    assert r.returncode == 2 and "ampscope: error:" in r.stderr
    r = run_py(BENCH, "--rounds", "0")
    assert r.returncode == 2 and "ampscope: error:" in r.stderr


def test_tiny_run_prints_and_writes_consistent_ratios(run_py, tmp_path):
    out = tmp_path / "b.json"
    modes = "param grad hooks (no-op),ampscope every=1"  # "off" is added when left out
    r = run_py(BENCH, "--rounds", "1", "--steps", "1", "--dtypes", "float32", "--modes", modes,
               "--threads", "1", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "cpu: " in r.stdout and "ampscope every=1" in r.stdout
    j = json.loads(out.read_text())
    med, ratio = j["median_s_per_step"]["float32"], j["ratio_to_off"]["float32"]
    assert set(med) == {"off", "param grad hooks (no-op)", "ampscope every=1"}
    assert all(v > 0 for v in med.values())
    for name, v in med.items():  # each ratio is that mode's median over off's
        assert abs(ratio[name] - v / med["off"]) < 1e-9
    assert ratio["off"] == 1.0
    assert j["cpu"] and j["isa"] and j["breakdown_s_per_step"] is None  # not every mode ran


def test_cpp_bench_bad_numbers_are_one_line_errors():
    exe = BUILD / "bin" / "ampscope-bench-overhead"
    for args, says in [(["--rounds", "3x"], '--rounds needs an integer, got "3x"'),
                       (["--rss-steps", "50,a"], "--rss-steps needs an integer"),
                       (["--only-every", "-2"], "--only-every must be >= 0")]:
        r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, args
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0], r.stderr
