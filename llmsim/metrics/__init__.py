"""Recording a run and reading it, one concept a module (bottom to top; nothing here imports the engine or the
cluster: :mod:`~llmsim.metrics.sources` names what is read of them):

* :mod:`~llmsim.metrics.recorder`: what the engines report (per-request columns, ITL histogram, timeline), the
  ``vllm bench serve`` summary and the per-instance table; outcomes are observed with ``Recorder.subscribe``;
* :mod:`~llmsim.metrics.table`: the requests table built from the recorded columns (when a result's is read);
* :mod:`~llmsim.metrics.result`: ``SimResult``, the tables and summary of one run, and how they are saved;
* :mod:`~llmsim.metrics.episode_summary`: a run's summary numbers without its tables (what an env reports at the
  end of every episode);
* :mod:`~llmsim.metrics.progress`: ``SimProgress``, requests done while a run goes (a recorder observer);
* :mod:`~llmsim.metrics.report`: the terminal summary, and ``python -m llmsim.metrics.report MULTIRUN_DIR``;
* :mod:`~llmsim.metrics.plots`: a run's figures; :mod:`~llmsim.metrics.sweep` and
  :mod:`~llmsim.metrics.sweep_plot`: a multirun as one table, and its figure;
* :mod:`~llmsim.metrics.collect`: ``python -m llmsim.metrics.collect SWEEP_DIR``, every run of any sweep.

``import llmsim`` loads only the recorder, the table, the result and the progress (no matplotlib, no Hydra).
"""
