"""The benchmark harness, ``python -m tools.bench <subcommand>`` (one module per subcommand:
op, distill, baseline, model, tp, cpu), over shared parts, one concern per module:

  timing    steady-state bursts, methods interleaved round by round, paired ratios
  clocks    SM clock and board power sampled in the background (NVML)
  inputs    the benchmark shapes, inputs, loss coefficients and the fp64 reference
  methods   the floor (GEMM), materialized logits and ours; peak extra memory of a call
  peers     the other fused kernels (verl, Liger, cut-cross-entropy), each optional
  report    a run's folder, log and JSON; markdown tables; the op's figure
  protocols the timing protocols compared against each other (``--diagnose``)
  profiling torch.profiler views of one step of ours, its gradient accuracy, its host time
  sweep     ours' candidate kernel configs at one shape
"""
