"""Recording a run and reading it: the recorder, summaries, progress, reports, plots and sweep tables."""
