"""@triton.jit kernels only, one module per op family. Launch decisions live in the
op modules of ato_core (``ato_core.<op>``), never here."""
