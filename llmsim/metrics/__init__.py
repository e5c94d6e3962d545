"""Recording a run and reading it, one concept a module (bottom to top; nothing here imports the engine or the
cluster: :mod:`~llmsim.metrics.sources` names what is read of them):

* :mod:`~llmsim.metrics.recorder`: what the engines report (per-request columns, ITL histogram, timeline), the
  ``vllm bench serve`` summary and the per-instance table; outcomes are observed with ``Recorder.subscribe``;
* :mod:`~llmsim.metrics.table`: the requests table built from the recorded columns (when a result's is read);
* :mod:`~llmsim.metrics.result`: ``SimResult``, the tables and summary of one run, and how they are saved;
* :mod:`~llmsim.metrics.episode_summary`: a run's summary numbers without its tables (what an env reports at the
  end of every episode);
* :mod:`~llmsim.metrics.progress`: ``SimProgress``, requests done while a run goes (a recorder observer);
* :mod:`~llmsim.metrics.report`: the terminal summary;
* :mod:`~llmsim.metrics.plots`: a run's figures.

A sweep's tables (what a Hydra multirun leaves) are read in :mod:`llmsim.cli`, above the simulator.

``import llmsim`` loads only the recorder, the table, the result and the progress (no matplotlib, no Hydra).
"""
