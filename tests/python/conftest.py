"""Shared fixtures: where the built CLI is, and a runner that captures its output."""
import os
import pathlib
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AMPSCOPE_BUILD_DIR", ROOT / "build"))
PYPKG = BUILD / "python"
sys.path.insert(0, str(PYPKG))  # the package `make` builds


@pytest.fixture
def run_py():
    """Runs `python -m ampscope ...` (or any python args) with the built package importable."""
    def run(*args, cwd=None, timeout=300, env=None):
        env = dict(os.environ, **(env or {}),
                   PYTHONPATH=os.pathsep.join([str(PYPKG), os.environ.get("PYTHONPATH", "")]))
        return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                              env=env, cwd=cwd, timeout=timeout)

    return run


# torch's gloo teardown now and then aborts a rank at exit (seen once in the unprofiled run of
# the FSDP2 test under a loaded ctest -j2): a run that ends so is run once more, on a new port.
TEARDOWN_ABORT = "terminate called without an active exception"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def torchrun(run_py):
    """Runs python args under `torch.distributed.run` with 2 local ranks (gloo)."""
    def run(*args, timeout=300):
        launch = ["-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                  "--master_addr", "127.0.0.1"]
        res = run_py(*launch, "--master_port", free_port(), *args, timeout=timeout)
        if res.returncode != 0 and TEARDOWN_ABORT in res.stderr:
            res = run_py(*launch, "--master_port", free_port(), *args, timeout=timeout)
        return res

    return run


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped without one)")


@pytest.fixture(scope="session")
def cli():
    exe = BUILD / "bin" / "ampscope"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run `make` first")

    def run(*args, timeout=300):
        return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                              timeout=timeout)

    return run
