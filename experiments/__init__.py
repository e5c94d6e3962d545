"""Paper reproductions, studies and benchmarks: not part of the installed packages."""
