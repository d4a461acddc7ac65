"""One module per ``hwprobe`` subcommand."""
