"""Small helpers shared by the demo and the tools."""
