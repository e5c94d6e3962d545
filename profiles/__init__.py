"""Measured (model, GPU) profiles for llmsim: the committed data in ``profiles/data`` and the tools behind it.

One command line, ``python -m llmsim.profiles <verb>`` (:mod:`llmsim.profiles.cli`):

==========  ==========================================================================================
verb        module (what it does)
==========  ==========================================================================================
build       ``build``: derive profiles/data from ../shared/profiles_raw, or check it (the default);
            ``--from-raw`` builds from your own measurements (``from_raw``)
validate    ``validate``: profiles/VALIDATION.md, the profiles against held-out measurements
estimate    ``estimate_report``: how good estimated profiles are (numbers from ``estimate_check``)
replay      ``replay`` (+ ``replay_timeline``): a recorded vLLM run through the simulator
calibrate   ``calibrate``: diagnose a profile's CPU overhead against a recorded run (never read by the build)
measure     ``measure``: time a model's operators on this machine with PyTorch (the rl extra)
==========  ==========================================================================================

How one profile is made: ``targets`` (what is built), ``document`` (one profile, every part from the first
provider with data in its chain, ``providers/``), ``compare`` (numeric comparison of generated files).
Loading a profile for a simulation is not here but in :mod:`llmsim.perf.profile`. See docs/profiles.md.
"""
