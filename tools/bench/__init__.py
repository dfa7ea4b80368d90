"""The benchmark harness, ``python -m tools.bench <subcommand>``: one module per subcommand
(op, distill, model, tp, cpu) over shared parts, one concern per module (each module's
docstring says which)."""
