"""Subcommands of the `poseidon` command (see poseidon.cli.COMMANDS)."""
