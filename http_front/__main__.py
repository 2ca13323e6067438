"""`python -m http_front`: the OpenAI-compatible HTTP front (what `omnimesh http` runs)."""
from __future__ import annotations

import argparse
import sys

from http_front.flags import add_arguments
from http_front.server import serve


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m http_front", description=__doc__)
    add_arguments(parser)
    return serve(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
