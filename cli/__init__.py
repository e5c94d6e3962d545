"""The command-line front-ends (``llmsim.cli``): the Hydra apps over conf/ and the readers of what their sweeps leave.

Hydra and OmegaConf are imported here and in the layers above (envs, agents), never by the simulator under
``llmsim/``: its rooms take plain dicts, which these apps compose from conf/ and hand down.

* :mod:`~llmsim.cli.hydra_app`: what every Hydra command shares (one-line errors with exit status 2, no folder left
  behind by a failed run, the ``--help`` preset lists);
* :mod:`~llmsim.cli.simulate`: the ``llmsim`` command (``python -m llmsim``), one simulation and its summary;
* :mod:`~llmsim.cli.planning`: ``llmsim-capacity`` and ``llmsim-deploy`` over :mod:`llmsim.planning`;
* :mod:`~llmsim.cli.sweep`, :mod:`~llmsim.cli.sweep_plot`, :mod:`~llmsim.cli.report`: a ``llmsim -m`` multirun as
  one table and figure (``python -m llmsim.cli.report MULTIRUN_DIR``);
* :mod:`~llmsim.cli.collect`: every run of a sweep of any launcher (``python -m llmsim.cli.collect SWEEP_DIR``);
* :mod:`~llmsim.cli.reproduce`: ``llmsim-reproduce``, which runs a source checkout's reproductions.
"""
