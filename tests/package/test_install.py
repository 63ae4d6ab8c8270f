"""Packaging, as a user installs ampscope: `cmake --install` into a temporary prefix, then a tiny
consumer project with find_package(ampscope) builds and runs with nothing set by hand (no
LD_LIBRARY_PATH) and writes a report; `pip install --no-build-isolation .` into a fresh
--system-site-packages venv gives an importable ampscope whose `python -m ampscope` works.
Oracles: the reports' own contents (schema, layer names, the bfloat16 compute dtype the
consumer's autocast asked for) and the import path (the venv's copy, not the build tree's)."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AMPSCOPE_BUILD_DIR", ROOT / "build")).resolve()
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "LD_PRELOAD")}


def run(cmd, timeout=600, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env=kw.pop("env", CLEAN_ENV), **kw)
    assert r.returncode == 0, f"{cmd}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def test_installed_cpp_library_links_and_runs(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", prefix])
    assert (prefix / "lib" / "cmake" / "ampscope" / "ampscopeConfig.cmake").exists()
    consumer = tmp_path / "consumer"
    args = ["-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"]
    if shutil.which("ccache"):
        args.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
    run(["cmake", "-S", ROOT / "tests" / "package" / "consumer", "-B", consumer, *args])
    run(["cmake", "--build", consumer])
    out = tmp_path / "out"
    run([consumer / "app", out])
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "ampscope.report/1"
    assert report["run"]["autocast_dtype"] == "bfloat16" and report["run"]["steps"] == 3
    root = next(l for l in report["layers"] if l["name"] == "")
    assert root["type"] == "Linear" and {p["name"] for p in root["params"]} == {"weight", "bias"}
    # LibTorch's Linear calls addmm (Python's calls linear); autocast ran it in bfloat16.
    matmul = [o for o in root["ops"] if o["op"] in ("aten::linear", "aten::addmm")]
    assert matmul and all(o["compute_dtype"] == "bfloat16" and o["autocast"] == "lower_precision"
                          for o in matmul), root["ops"]
    runpath = run(["readelf", "-d", prefix / "lib" / "libampscope.so"]).stdout
    assert str(pathlib.Path(__import__("torch").__file__).parent / "lib") in runpath


def test_missing_torch_is_one_clear_cmake_message(tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", BUILD, "--prefix", prefix])
    # Pretend the torch ampscope was built against is not there: point Torch_DIR at nothing.
    r = subprocess.run(["cmake", "-S", str(ROOT / "tests" / "package" / "consumer"), "-B",
                        str(tmp_path / "b"), "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}",
                        f"-DTorch_DIR={tmp_path / 'no-torch'}"],
                       capture_output=True, text=True, env=CLEAN_ENV, timeout=300)
    assert r.returncode != 0
    assert "ampscope needs LibTorch" in r.stderr and "Torch_DIR" in r.stderr, r.stderr[-2000:]


def test_pip_install_into_a_fresh_venv(tmp_path):
    # A copy of the tracked sources (pip builds in place; the checkout stays untouched), built
    # through the existing build folder so nothing recompiles.
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    if len([f for f in files if f]) < 10:
        pytest.skip("not a git checkout")
    for f in filter(None, files):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, src / f)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", venv])
    py = venv / "bin" / "python"
    run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps", "-q", src],
        env=dict(CLEAN_ENV, AMPSCOPE_BUILD_DIR=str(BUILD)))
    where = run([py, "-c", "import ampscope, os; print(os.path.dirname(ampscope.__file__))"],
                cwd=tmp_path).stdout.strip()
    assert pathlib.Path(where).is_relative_to(venv), where
    script = tmp_path / "train.py"
    script.write_text("import torch\nm = torch.nn.Linear(4, 4)\n"
                      "with torch.autocast('cpu', dtype=torch.bfloat16):\n"
                      "    y = m(torch.randn(2, 4))\ny.float().sum().backward()\n")
    run([py, "-m", "ampscope", "--out", tmp_path / "out", script], cwd=tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["schema"] == "ampscope.report/1"
    ops = [o for l in report["layers"] if l["name"] == "" for o in l["ops"]]
    assert any(o["op"] == "aten::linear" and o["compute_dtype"] == "bfloat16" for o in ops)
