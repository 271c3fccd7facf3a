"""``ato check`` and ``ato bench``."""

from __future__ import annotations

import argparse
import sys

from .check import choices


def version() -> str:
    """The installed distribution's version (pyproject.toml's), or "unknown" for a source tree
    that was never installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("ato")
    except PackageNotFoundError:
        return "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="ato", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ato {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="run every op in both frameworks against the reference and each other")
    c.add_argument("--quick", action="store_true", help="fewer cases")
    c.add_argument("--op", action="append", choices=choices(),
                   help="op family or group to check (repeatable; default: all). On a GPU with a cold Triton cache the "
                        "whole check compiles for longer than 10 minutes: split it by family")
    b = sub.add_parser("bench", help="GPU timings against peers (table, CSV, PNG)")
    b.add_argument("--out", default="benchmarks/results", help="folder for the CSV, PNG and table")
    b.add_argument("--quick", action="store_true", help="fewer repetitions")
    b.add_argument("--op", action="append", choices=choices(),
                   help="op family or group whose table to time (repeatable; default: all)")
    args = parser.parse_args(argv)
    if args.command == "check":
        from .check import run

        return run(quick=args.quick, ops=args.op)
    from .bench import run

    return run(out=args.out, quick=args.quick, ops=args.op)


if __name__ == "__main__":
    sys.exit(main())
