"""The command line: the typer app, its report printing, and the demos."""
