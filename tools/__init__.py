"""Command-line tools: `xl-opt` (passes on textual IR) and `xl-run` (execute a program)."""
