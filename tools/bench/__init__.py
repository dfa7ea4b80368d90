"""GPU benchmark building blocks shared by tools/bench_*.py, one concern per module:

  timing    steady-state bursts, methods interleaved round by round, paired ratios
  clocks    SM clock and board power sampled in the background (NVML)
  memory    peak extra memory of one call
  inputs    the benchmark shapes, inputs, loss coefficients and the fp64 reference
  methods   the floor (GEMM), materialized logits and ours
  peers     the other fused kernels (verl, Liger, cut-cross-entropy), each optional
  report    the markdown table and the figure (time and memory relative to the floor)
  protocols the timing protocols compared against each other (``--diagnose``)
  profiling torch.profiler views of one step of ours, its gradient accuracy, its host time
  sweep     ours' candidate kernel configs at one shape
"""
