"""Builds libuform with make, then the cffi module uform._uform (build_ffi.py) linking it.

UFORM_MEDIA in the environment reaches make (e.g. UFORM_MEDIA=none pip install .)."""
import os
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithMake(build_ext):
    """Runs `make lib` first, so the extension links a fresh c/build/libuform.a."""

    def run(self):
        subprocess.check_call(["make", "-C", ROOT, "lib", f"-j{os.cpu_count() or 1}"])
        # The media libraries make found are known only now (c/build/media.txt).
        sys.path.insert(0, ROOT)
        from build_ffi import media_link_arguments

        media = media_link_arguments()
        for extension in self.extensions:
            extension.libraries = media["libraries"] + ["m"]
            extension.library_dirs = media["library_dirs"]
            extension.extra_link_args = media["extra_link_args"] + ["-pthread"]
        super().run()


setup(
    cffi_modules=["build_ffi.py:ffi"],
    cmdclass={"build_ext": BuildWithMake},
)
