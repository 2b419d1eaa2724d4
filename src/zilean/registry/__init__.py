"""The job registry: job rows and what they reference (global variables, script volumes)."""
