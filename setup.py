"""pip install --no-build-isolation .  — builds the core with the project's CMake against the
torch of the installing Python (so build isolation must be off: the build needs that torch),
then packages python/ampscope with the compiled library. AMPSCOPE_BUILD_DIR reuses a build."""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = os.environ.get("AMPSCOPE_BUILD_DIR", os.path.join(ROOT, "build"))
        subprocess.check_call(["make", "-C", ROOT, "build", f"BUILD_DIR={build}",
                               f"PYTHON={sys.executable}"])
        lib = os.path.join(build, "python", "ampscope", "_ampscope.so")
        shutil.copy2(lib, os.path.join(self.build_lib, "ampscope", "_ampscope.so"))


setup(cmdclass={"build_py": BuildWithCMake})
