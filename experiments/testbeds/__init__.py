"""The papers' testbeds under their baselines: operating points."""
