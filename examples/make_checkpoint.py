"""Writes a small random uform checkpoint (no trained weights ship with the repository yet).

    python3 examples/make_checkpoint.py out.safetensors [--depth 2 --hidden 128 ...]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from reference.checkpoint import write_random_checkpoint  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--dimensions", type=int, default=64)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--token-width", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    write_random_checkpoint(arguments.path, depth=arguments.depth, hidden=arguments.hidden,
                            dimensions=arguments.dimensions, context=arguments.context,
                            token_width=arguments.token_width, seed=arguments.seed)


if __name__ == "__main__":
    main()
