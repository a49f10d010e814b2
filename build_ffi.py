"""cffi builder of uform._uform, the out-of-line API-mode module over libuform.

The declarations come from the C preprocessor's output of c/include/uform.h
(with UFORM_CDEF defined, the header holds only what cffi reads), so nothing is
copied by hand. The module links the static libuform.a built by `make lib`,
and with it the media libraries that build found: the Makefile asks
pkg-config once and writes them to c/build/media.txt, read here.

    python3 build_ffi.py    builds uform/_uform*.so in place (what `make` runs)
    setup.py                uses `ffi` through cffi_modules
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

import cffi

ROOT = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join(ROOT, "c", "include", "uform.h")
LIBRARY = os.path.join(ROOT, "c", "build", "libuform.a")
MEDIA = os.path.join(ROOT, "c", "build", "media.txt")


def media_link_arguments() -> dict:
    """The link arguments of the media libraries in libuform.a (c/build/media.txt).

    Empty until the Makefile has written the file; setup.py calls this again
    after `make lib`."""
    arguments: dict = {"libraries": [], "library_dirs": [], "extra_link_args": []}
    if not os.path.exists(MEDIA):
        return arguments
    with open(MEDIA, encoding="utf-8") as stream:
        fields = dict(line.rstrip("\n").split("=", 1) for line in stream if "=" in line)
    for flag in shlex.split(fields.get("libs", "")):
        if flag.startswith("-l"):
            arguments["libraries"].append(flag[2:])
        elif flag.startswith("-L"):
            arguments["library_dirs"].append(flag[2:])
        else:
            arguments["extra_link_args"].append(flag)
    return arguments


def _preprocessed_header() -> str:
    compiler = os.environ.get("CC", "cc")
    return subprocess.check_output(
        [compiler, "-E", "-P", "-DUFORM_CDEF", HEADER], text=True
    )


ffi = cffi.FFI()
ffi.cdef(_preprocessed_header())
# Progress handlers re-enter Python through this callback; `user` is a handle.
ffi.cdef('extern "Python" int uform_python_progress(void *, size_t, size_t);')
_media = media_link_arguments()
ffi.set_source(
    "uform._uform",
    '#include "uform.h"',
    include_dirs=[os.path.join(ROOT, "c", "include")],
    extra_objects=[LIBRARY],
    libraries=_media["libraries"] + ["m"],
    library_dirs=_media["library_dirs"],
    extra_link_args=_media["extra_link_args"] + ["-pthread"],
)


def main() -> None:
    if not os.path.exists(LIBRARY):
        sys.exit(f"{LIBRARY} is missing: run `make lib` first")
    if not os.path.exists(MEDIA) or os.path.getmtime(MEDIA) > os.path.getmtime(LIBRARY):
        sys.exit(f"{MEDIA} is newer than {LIBRARY} (another UFORM_MEDIA?): run `make lib` first")
    temporary = os.path.join(ROOT, "c", "build", "ffi")
    built = ffi.compile(tmpdir=temporary, verbose=False)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    target = os.path.join(ROOT, "uform", "_uform" + suffix)
    shutil.copyfile(built, target + ".tmp")
    os.replace(target + ".tmp", target)


if __name__ == "__main__":
    main()
