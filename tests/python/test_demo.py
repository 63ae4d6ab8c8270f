"""The bundled demo end to end: the planted float16 overflow is found, attributed to the leaf
that produced it, re-checked in float32 and pinned; nothing else is pinned."""
import json
import math

import pytest

WO = "blocks.1.ffn.wo"


@pytest.fixture(scope="module")
def fp16_run(cli, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo16")
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--steps", "12", "--quiet",
              "--out", out, "--fail-on-nonfinite")
    return res, out


def load(out, name):
    return json.loads((out / name).read_text())


def test_fp16_demo_exits_3_on_nonfinite_and_writes_all_files(fp16_run):
    res, out = fp16_run
    assert res.returncode == 3, res.stderr
    for name in ("report.json", "report.html", "precision_map.json"):
        assert (out / name).stat().st_size > 0
    assert "report.html" in res.stdout


def test_fp16_demo_origin_is_the_planted_leaf(fp16_run):
    _, out = fp16_run
    report = load(out, "report.json")
    first = report["first_nonfinite"]
    # LibTorch's Linear on a 3-d input runs matmul + add_ (no aten::linear): the matmul overflows.
    assert first["layer"] == WO and first["op"] == "aten::matmul"
    assert first["phase"] == "forward" and first["kind"] == "inf"
    assert first["inputs_finite"] is True and first["fp32_also_nonfinite"] is False
    # The onset is planted near the middle of the run (2x growth a step).
    assert 4 <= first["step"] <= 8


def test_fp16_demo_pins_that_leaf_and_nothing_else(fp16_run):
    _, out = fp16_run
    report = load(out, "report.json")
    pins = [r["layer"] for r in report["recommendations"] if r["action"] == "pin_fp32"]
    assert pins == [WO]
    assert load(out, "precision_map.json")["pin_fp32"] == [WO]


@pytest.mark.parametrize("filters", [["--exclude-ops", "aten::matmul"],
                                     ["--ops", "aten::*mm*,*Backward0"],
                                     ["--include", "blocks.0"]])
def test_a_filtered_run_blames_nothing_it_did_not_see(cli, tmp_path, filters):
    # The oracle is the unfiltered run above: the origin is WO's matmul. With that op or layer
    # left out, whatever first shows the NaN/Inf was handed them (or met them in backward): no
    # pin and no fix of an innocent layer, only the first sighting and how to find the maker.
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--steps", "12", "--quiet",
              "--out", tmp_path, *filters)
    assert res.returncode == 0, res.stderr
    report = load(tmp_path, "report.json")
    assert report["first_nonfinite"] is not None
    critical = [r for r in report["recommendations"] if r["severity"] == "critical"]
    assert [(r["action"], r["reasons"][0]) for r in critical] == [
        ("watch", "nonfinite_origin_unobserved")]
    assert not any(r["action"] in ("pin_fp32", "fix_model") for r in report["recommendations"])
    assert load(tmp_path, "precision_map.json")["pin_fp32"] == []


def test_fp16_demo_report_is_self_consistent(fp16_run):
    _, out = fp16_run
    report = load(out, "report.json")
    assert report["schema"] == "ampscope.report/1"
    assert report["run"]["steps"] == 12 and report["run"]["autocast_dtype"] == "float16"
    names = {layer["name"] for layer in report["layers"]}
    assert {"", "blocks.0.attn.qkv", WO, "head"} <= names
    wo = next(l for l in report["layers"] if l["name"] == WO)
    linear = [o for o in wo["ops"] if o["op"] == "aten::matmul" and o["phase"] == "forward"]
    assert linear and all(o["compute_dtype"] == "float16" for o in linear)
    assert all(o["autocast"] == "lower_precision" for o in linear)
    assert any(o["phase"] == "backward" for o in wo["ops"])
    assert {p["name"] for p in wo["params"]} == {WO + ".weight", WO + ".bias"}
    for layer in report["layers"]:
        for op in layer["ops"]:
            s = op["stats"]
            assert s["count"] >= s["nan"] + s["posinf"] + s["neginf"] + s["zeros"]
            assert sum(s["exp_hist"].values()) == s["count"] - s["nan"] - s["posinf"] - s["neginf"] - s["zeros"]


def test_bf16_demo_is_clean_but_shows_float16_headroom(cli, tmp_path):
    res = cli("demo", "--device", "cpu", "--dtype", "bfloat16", "--steps", "12", "--quiet",
              "--out", tmp_path)
    assert res.returncode == 0, res.stderr
    report = load(tmp_path, "report.json")
    assert report["first_nonfinite"] is None
    assert report["recommendations"] == []
    wo = next(l for l in report["layers"] if l["name"] == WO)
    absmax = max(o["stats"]["absmax"] for o in wo["ops"] if o["phase"] == "forward")
    assert absmax > 65504 and math.isfinite(absmax)
    assert WO in res.stdout and "float16" in res.stdout


def test_applying_the_map_removes_the_nonfinite_values(cli, fp16_run, tmp_path):
    _, out = fp16_run
    res = cli("demo", "--device", "cpu", "--dtype", "float16", "--steps", "12", "--quiet",
              "--out", tmp_path, "--map", out / "precision_map.json", "--fail-on-nonfinite")
    assert res.returncode == 0, res.stdout + res.stderr
    report = load(tmp_path, "report.json")
    assert report["first_nonfinite"] is None
    # What remains is true of any float16 run without a GradScaler: no pins, loss scaling.
    assert [(r["action"], r["reasons"]) for r in report["recommendations"]] == \
        [("loss_scaling", ["grad_underflow_float16"])]
    wo = next(l for l in report["layers"] if l["name"] == WO)
    assert {o["compute_dtype"] for o in wo["ops"] if o["phase"] == "forward"} == {"float32"}
    diff = cli("diff", out / "report.json", tmp_path / "report.json")
    assert diff.returncode == 0, diff.stderr
    assert "non-finite: gone" in diff.stdout
    assert f"no longer needed: {WO}" in diff.stdout
    assert f"{WO}  aten::matmul: float16 -> float32" in diff.stdout


def test_ctrl_c_stops_the_demo_and_still_writes_the_report(tmp_path):
    import signal
    import subprocess
    from conftest import BUILD
    p = subprocess.Popen([str(BUILD / "bin" / "ampscope"), "demo", "--device", "cpu",
                          "--steps", "100000", "--out", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = [p.stdout.readline() for _ in range(3)]  # banner + two steps
    assert "step" in lines[-1], lines
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err  # 128 + SIGINT, what a shell expects after Ctrl-C
    assert "interrupted after" in out
    report = load(tmp_path, "report.json")
    assert 2 <= report["run"]["steps"] < 100000
