"""ato: fast attention and fused kernels for PyTorch and JAX, written once in Triton.

  ato check   every op in both frameworks against the float64 reference and each other
  ato bench   GPU timings against the peers (needs a CUDA GPU)

Without a GPU the kernels run under Triton's interpreter: right, not fast."""

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
    parser = argparse.ArgumentParser(prog="ato", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ato {version()}")
    sub = parser.add_subparsers(dest="command")
    c = sub.add_parser("check", help="run every op in both frameworks against the reference and each other",
                       description="Runs every op (forward and gradients) in ato_torch and ato_jax against the "
                                   "float64 reference and against each other. On a CUDA GPU the kernels are "
                                   "compiled; without one they run under Triton's interpreter (minutes: for "
                                   "correctness, not speed).")
    c.add_argument("--quick", action="store_true", help="fewer cases")
    c.add_argument("--op", action="append", choices=choices(),
                   help="op family or group to check (repeatable; default: all). On a GPU with a cold Triton cache the "
                        "whole check compiles for longer than 10 minutes: split it by family")
    b = sub.add_parser("bench", help="GPU timings against peers (table, CSV, PNG); needs a CUDA GPU",
                       description="Times each op against its peers (fla, Liger, SDPA, XLA) on a CUDA GPU and "
                                   "writes a table, CSV and PNG per family. Needs a CUDA GPU (exits 2 without "
                                   "one) and the peers installed (pip install -e '.[gpu]' and the peers' wheels).")
    b.add_argument("--out", default="benchmarks/results", help="folder for the CSV, PNG and table")
    b.add_argument("--quick", action="store_true", help="fewer repetitions")
    b.add_argument("--op", action="append", choices=choices() + ["flash_options", "flash_varlen", "flash_shapes"],
                   help="op family or group whose table to time, or flash_options (flash attention's "
                        "windows, softcap, ALiBi, lengths, segments), flash_varlen (packed documents) or "
                        "flash_shapes (flash attention against cuDNN at every shape of issue 22); "
                        "repeatable; default: all")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "check":
        from .check import run

        return run(quick=args.quick, ops=args.op)
    from .bench import run

    return run(out=args.out, quick=args.quick, ops=args.op)


if __name__ == "__main__":
    sys.exit(main())
