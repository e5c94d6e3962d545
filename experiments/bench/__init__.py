"""Benchmarks: simulator, env, training and live-decision speed."""
