"""The ``modelgate`` command line (typer): serve, and manage accounts, credits, keys and tokens."""
