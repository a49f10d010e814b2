"""Builds libuform with make, then the cffi module uform._uform (build_ffi.py) linking it."""
import os
import subprocess

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithMake(build_ext):
    """Runs `make lib` first, so the extension links a fresh c/build/libuform.a."""

    def run(self):
        subprocess.check_call(["make", "-C", ROOT, "lib", f"-j{os.cpu_count() or 1}"])
        super().run()


setup(
    cffi_modules=["build_ffi.py:ffi"],
    cmdclass={"build_ext": BuildWithMake},
)
