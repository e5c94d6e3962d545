"""Studies that are not papers: prefix reuse, disaggregation, estimator accuracy."""
