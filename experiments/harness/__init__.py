"""The one harness every paper reproduction and study shares: claim rows and verdicts (claims), sizes, the process
pool (pool), output files and markdown (pages), training and evaluation of learned routers (training), the
experiments by name (registry), the reproduction report (reproduction_report) and the benchmarks' timing (timing)."""
