"""Service entry points: one function per `zilean` subcommand that runs a process."""
