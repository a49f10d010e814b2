"""cffi builder of uform._uform, the out-of-line API-mode module over libuform.

The declarations come from the C preprocessor's output of c/include/uform.h
(with UFORM_CDEF defined, the header holds only what cffi reads), so nothing is
copied by hand. The module links the static libuform.a built by `make lib`.

    python3 build_ffi.py    builds uform/_uform*.so in place (what `make` runs)
    setup.py                uses `ffi` through cffi_modules
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import cffi

ROOT = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(ROOT, "c", "include", "uform.h")
LIBRARY = os.path.join(ROOT, "c", "build", "libuform.a")


def _preprocessed_header() -> str:
    compiler = os.environ.get("CC", "cc")
    return subprocess.check_output(
        [compiler, "-E", "-P", "-DUFORM_CDEF", HEADER], text=True
    )


ffi = cffi.FFI()
ffi.cdef(_preprocessed_header())
# Progress handlers re-enter Python through this callback; `user` is a handle.
ffi.cdef('extern "Python" int uform_python_progress(void *, size_t, size_t);')
ffi.set_source(
    "uform._uform",
    '#include "uform.h"',
    include_dirs=[os.path.join(ROOT, "c", "include")],
    extra_objects=[LIBRARY],
    libraries=["m"],
    extra_link_args=["-pthread"],
)


def main() -> None:
    if not os.path.exists(LIBRARY):
        sys.exit(f"{LIBRARY} is missing: run `make lib` first")
    temporary = os.path.join(ROOT, "c", "build", "ffi")
    built = ffi.compile(tmpdir=temporary, verbose=False)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = os.path.join(ROOT, "uform", "_uform" + suffix)
    shutil.copyfile(built, target + ".tmp")
    os.replace(target + ".tmp", target)


if __name__ == "__main__":
    main()
