"""The ``ato`` command: ``ato check`` (every op, both frameworks, against the reference
and each other) and ``ato bench`` (GPU timings against peers)."""
