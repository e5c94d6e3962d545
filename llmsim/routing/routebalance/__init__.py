"""RouteBalance: fused model routing and load balancing, its predictors and telemetry."""
