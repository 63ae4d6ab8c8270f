"""The CLI's contract: exit codes, one-line errors for every bad input, --help everywhere."""
import json

import pytest
import torch

VALID_MIN = {"schema": "ampscope.report/1", "run": {}, "layers": [], "first_nonfinite": None,
             "loss_scale": [], "recommendations": []}


def bad_inputs(tmp):
    """Every kind of unusable report file, by name."""
    cases = {}
    cases["missing"] = tmp / "nope.json"
    (tmp / "empty.json").write_text("")
    cases["empty"] = tmp / "empty.json"
    good = json.dumps(VALID_MIN)
    (tmp / "truncated.json").write_text(good[: len(good) // 2])
    cases["truncated"] = tmp / "truncated.json"
    (tmp / "schema.json").write_text(json.dumps({**VALID_MIN, "schema": "other/9"}))
    cases["wrong_schema"] = tmp / "schema.json"
    (tmp / "noschema.json").write_text(json.dumps({k: v for k, v in VALID_MIN.items() if k != "schema"}))
    cases["no_schema"] = tmp / "noschema.json"
    bad_type = dict(VALID_MIN, layers=[{"name": "a", "type": "Linear", "ops": [
        {"op": "aten::mm", "phase": "forward", "calls": "many"}], "params": []}])
    (tmp / "types.json").write_text(json.dumps(bad_type))
    cases["wrong_types"] = tmp / "types.json"
    (tmp / "garbage.json").write_bytes(bytes(range(256)) * 4)
    cases["binary_garbage"] = tmp / "garbage.json"
    (tmp / "array.json").write_text("[1, 2, 3]")
    cases["not_an_object"] = tmp / "array.json"
    (tmp / "adir").mkdir()
    cases["directory"] = tmp / "adir"
    return cases


def assert_one_line_error(res):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("ampscope: error: "), res.stderr
    for crash in ("terminate called", "Traceback", "Segmentation", "Aborted", "Exception raised"):
        assert crash not in res.stderr


@pytest.mark.parametrize("command", ["summary", "map", "html"])
def test_every_bad_report_gives_exit_2_and_one_line(cli, tmp_path, command):
    for name, path in bad_inputs(tmp_path).items():
        extra = ["-o", tmp_path / "out.file"] if command in ("map", "html") else []
        res = cli(command, path, *extra)
        assert_one_line_error(res)
        assert str(path.name) in res.stderr, (name, res.stderr)


@pytest.mark.parametrize("args", [
    ["frobnicate"],
    ["summary"],
    ["summary", "a.json", "b.json"],
    ["summary", "--bogus", "a.json"],
    ["map", "x.json"],                          # no -o
    ["map", "x.json", "-o"],                    # -o without a value
    ["map", "x.json", "-o", "m.json", "--min-severity", "urgent"],
    ["demo", "--steps", "zero"],
    ["demo", "--steps", "-3"],
    ["demo", "--dtype", "float8"],
    ["demo", "--device", "tpu"],
    ["demo", "--out", ""],
    ["autocast-ops", "--device", "npu"],
    ["diff", "a.json", "b.json"],
])
def test_bad_usage_gives_exit_2_and_one_line(cli, args):
    assert_one_line_error(cli(*args))


@pytest.mark.parametrize("command", ["map", "html"])
def test_output_over_the_report_itself_is_refused(cli, tmp_path, command):
    report = tmp_path / "r.json"
    assert cli("demo", "--steps", "2", "--out", tmp_path / "d").returncode in (0, 1)
    report.write_bytes((tmp_path / "d" / "report.json").read_bytes())
    before = report.read_bytes()
    assert_one_line_error(cli(command, report, "-o", tmp_path / "." / "r.json"))
    assert report.read_bytes() == before  # not overwritten


def test_no_arguments_prints_usage_and_exits_2(cli):
    res = cli()
    assert res.returncode == 2 and "usage: ampscope" in res.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_demo_on_cuda_without_a_gpu_is_a_clear_error(cli):
    res = cli("demo", "--device", "cuda")
    assert_one_line_error(res)
    assert "cuda" in res.stderr


@pytest.mark.parametrize("command", ["demo", "summary", "map", "html", "autocast-ops"])
def test_help_on_every_command(cli, command):
    res = cli(command, "--help")
    assert res.returncode == 0
    assert res.stdout.startswith(f"usage: ampscope {command}")


ORACLE = """
import sys, torch
key = sys.argv[1]
for name in torch._C._dispatch_get_all_op_names():
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
        print(name)
"""


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_autocast_ops_are_the_dispatchers(cli, device):
    import subprocess
    import sys
    key = "AutocastCPU" if device == "cpu" else "AutocastCUDA"
    # Torch's own dispatcher, in a fresh process that (like the CLI) loads torch only.
    names = subprocess.run([sys.executable, "-c", ORACLE, key], capture_output=True, text=True,
                           check=True).stdout.split()
    expected = set()
    for name in names:
        op, _, overload = name.partition(".")
        expected.add((op, overload or "-"))
    res = cli("autocast-ops", "--device", device)
    assert res.returncode == 0, res.stderr
    rows = [line.split()[:2] for line in res.stdout.splitlines()[1:-1]]
    listed = {(r[0], r[1]) for r in rows}
    assert listed == expected
    assert ("aten::mm", "-") in listed and not any(op == "aten::relu" for op, _ in listed)
