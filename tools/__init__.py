"""Developer tools (benchmarks, checks, patch generation); not shipped in the wheel. A
package so that they run as ``python -m tools.<name>`` from the repository root. The model
they build comes from ``megatron_overlay.model_builder``; tools never import tests."""
