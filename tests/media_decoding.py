"""The internal decoders, reached through tests/c/decode_tool.c (built under
ASan/UBSan by make): the decoders are not public API, so the tests drive a
small C program instead of growing the library's interface.

Failures come back as the library's own exceptions (uform.FormatError, ...)
carrying the library's message. A crash, a sanitizer report or a leak makes
the tool exit nonzero, and anything written to stderr (the library never
prints, nor may the libraries under it) fails the test too."""
from __future__ import annotations

import os
import subprocess

import numpy as np

from uform._errors import raise_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Any single allocation over 1 GiB is a sanitizer error, so a decoder that
# allocates what a hostile header declares fails loudly; no test file needs
# that much.
# Leaks inside system libraries' own error paths are listed, with their
# upstream reports, in tests/c/lsan-system-libraries.supp.
SANITIZER_OPTIONS = {
    "ASAN_OPTIONS": "max_allocation_size=1073741824:allocator_may_return_null=0:detect_leaks=1",
    "LSAN_OPTIONS": "suppressions=" + os.path.join(ROOT, "tests", "c", "lsan-system-libraries.supp")
    + ":print_suppressions=0",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}

OK, FORMAT, UNSUPPORTED, INVALID_ARGUMENT = 0, 3, 2, 1


def build_tool(build: str = "c/build", media: str | None = None) -> str:
    """Makes BUILD/decode_tool (only error.c and the media sources) and returns its path."""
    command = ["make", "--no-print-directory", "-s", "-C", ROOT, f"BUILD={build}"]
    if media is not None:
        command.append(f"UFORM_MEDIA={media}")
    target = f"{build}/decode_tool"
    result = subprocess.run(command + [target], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"make {target} failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")
    return os.path.join(ROOT, target)


class Tool:
    def __init__(self, path: str) -> None:
        self.path = path

    def _run(self, arguments: list) -> bytes:
        result = subprocess.run(
            [self.path, *map(str, arguments)], capture_output=True, env={**os.environ, **SANITIZER_OPTIONS}, timeout=300
        )
        if result.returncode != 0 or result.stderr:
            # A sanitizer report, or the library (or a library under it) printing.
            raise AssertionError(
                f"decode_tool {' '.join(map(str, arguments))} exited {result.returncode}, stderr:\n"
                + result.stderr.decode("utf-8", "replace")[-4000:]
            )
        return result.stdout

    def _decode(self, arguments: list) -> tuple:
        output = self._run(arguments)
        head, _, body = output.partition(b"\n")
        words = head.split(b" ", 2)
        if words[0] == b"error":
            raise_status(int(words[1]), words[2].decode("utf-8", "replace") if len(words) > 2 else "")
        return [int(word) for word in head.split()[1:]], body

    def formats(self) -> int:
        return int(self._run(["formats"]).split()[1])

    def image(self, path) -> np.ndarray:
        (height, width), body = self._decode(["image", path])
        return np.frombuffer(body, np.uint8).reshape(height, width, 3)

    def video(self, path, stride: int = 1) -> np.ndarray:
        (frames, height, width), body = self._decode(["video", stride, path])
        return np.frombuffer(body, np.uint8).reshape(frames, height, width, 3)

    def audio(self, path, rate: int = 0) -> np.ndarray:
        (count,), body = self._decode(["audio", rate, path])
        return np.frombuffer(body, np.float32, count)

    def _statuses(self, arguments: list) -> list:
        """(index or length, status, hash of the output) per line."""
        lines = self._run(arguments).decode().split()
        return [(int(lines[i]), int(lines[i + 1]), lines[i + 2]) for i in range(0, len(lines), 3)]

    def prefixes(self, kind: str, argument, path) -> list:
        """Decodes every prefix data[:n] of the file, n = 0 .. size."""
        return self._statuses([kind, *([] if argument is None else [argument]), "--prefixes", path])

    def threads(self, kind: str, argument, path, threads: int, rounds: int) -> list:
        """(status, hash) of each distinct answer of `threads` threads decoding the file `rounds` times."""
        lines = self._run([kind, *([] if argument is None else [argument]), "--threads", threads, rounds, path])
        words = lines.decode().split()
        return [(int(words[i]), words[i + 1]) for i in range(0, len(words), 2)]

    def flips(self, kind: str, argument, path, seed: int, count: int) -> list:
        """Decodes `count` copies of the file with 1 to 8 random bytes replaced."""
        return self._statuses([kind, *([] if argument is None else [argument]), "--flips", seed, count, path])
