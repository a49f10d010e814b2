"""Shared fixtures: random checkpoints of several shapes and the PyTorch reference."""
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.dirname(TESTS))

import uform  # noqa: E402


def supported_cpu_classes() -> list:
    """Every CPU class this machine and build can run, found by asking the library."""
    import tempfile

    from reference.checkpoint import write_random_checkpoint

    classes = []
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "probe.safetensors")
        write_random_checkpoint(path, depth=1, hidden=64, dimensions=8, context=8)
        for cpu_class in uform.CPUClass:
            try:
                uform.Model.load_ram(path, cpu_class=cpu_class)
            except uform.UnsupportedError:
                continue
            classes.append(cpu_class)
    return classes


CPU_CLASSES = supported_cpu_classes()

# The x86-64 classes whose GEMMs round activations to BF16 (docs/architecture.md's class
# table): their outputs are held to the BF16 tolerances. The Arm BF16 classes never run
# under this interpreter (tests/c and scripts/test-arm.sh hold them to the same bounds).
BF16_CLASSES = (uform.CPUClass.SAPPHIRE, uform.CPUClass.AMX)


@pytest.fixture(scope="session")
def checkpoint_factory(tmp_path_factory):
    """checkpoint(**shape) -> path of a random checkpoint, cached per shape."""
    from reference.checkpoint import write_random_checkpoint

    cache = {}

    def make(**shape):
        key = tuple(sorted(shape.items()))
        if key not in cache:
            path = tmp_path_factory.mktemp("checkpoints") / f"model-{len(cache)}.safetensors"
            write_random_checkpoint(str(path), **shape)
            cache[key] = str(path)
        return cache[key]

    return make
