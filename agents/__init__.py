"""Learning routers (``llmsim.agents``): Double DQN, discrete SAC and the argmax SAC on a small typed base, with
the ``llmsim-train``, ``llmsim-evaluate`` and ``llmsim-export`` commands. docs/agents.md maps the files.

Importing this package imports nothing else: the algorithms need the ``rl`` extra (torch, gymnasium,
stable-baselines3), exporting also the ``export`` extra (agents/cli.py says which one is missing).
"""
