"""Shared fixtures: where the built CLI is, and a runner that captures its output."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("AMPSCOPE_BUILD_DIR", ROOT / "build"))


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
