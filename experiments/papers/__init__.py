"""One module per paper: its testbed, its claims and how they are measured."""
