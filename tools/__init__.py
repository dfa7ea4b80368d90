"""Developer tools (benchmarks, checks, patch generation); not shipped in the wheel.

A package only so that the tools and the tests share ``tools.gpt_setup`` (tests may
import tools; tools never import tests)."""
