"""The `hefprobe` console script: the command line, run by the module's Rust code."""

import sys

from . import _native


def main() -> None:
    sys.exit(_native.main(["hefprobe", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
