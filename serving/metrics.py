"""The router's own Prometheus metrics (one registry per app: several routers can live in one process). Labels are
bounded and hold no secret: endpoints are the router's own routes, codes what it answered, backends their config
names (never URLs)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# decision latency: from 20 us (a heuristic) to 50 ms (a slow policy), so the 2 / 5 ms targets are visible
_DECISION_BUCKETS = (2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2)


class RouterMetrics:
    """Every metric the router exports (docs/serving.md lists them); each backend's series exist from the start."""

    def __init__(self, backends: list[str]) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("llmsim_router_requests", "Client requests answered, by endpoint and HTTP status",
                                ["endpoint", "code"], registry=r)
        self.decisions = Counter("llmsim_router_decisions", "Requests sent to each backend (retries included)",
                                 ["backend"], registry=r)
        self.in_flight = Gauge("llmsim_router_in_flight", "Client requests being answered", registry=r)
        self.queued = Gauge("llmsim_router_queued", "Requests held by the policy (WAIT) for a later decision",
                            registry=r)
        self.decision_latency = Histogram("llmsim_router_decision_latency_seconds",
                                          "Time to build the cluster state and run the policy for one decision",
                                          buckets=_DECISION_BUCKETS, registry=r)
        self.failures = Counter("llmsim_router_backend_failures", "Attempts a backend failed before its first token "
                                "(refused, timed out, 5xx, redirect, not JSON, not SSE, ejected)", ["backend"],
                                registry=r)
        self.rate_limited = Counter("llmsim_router_rate_limited", "Attempts a backend refused with 429 (too many "
                                    "requests), retried on another backend while one is left", ["backend"], registry=r)
        self.retries = Counter("llmsim_router_retries", "Requests retried on another backend, by failed backend",
                               ["backend"], registry=r)
        self.resends = Counter("llmsim_router_upstream_resends", "Requests sent again to the same backend after a "
                               "reused connection failed before any answer (the keep-alive race)", ["backend"],
                               registry=r)
        self.ejections = Counter("llmsim_router_ejections", "Backends ejected by health checks or refused connections",
                                 ["backend"], registry=r)
        self.fallbacks = Counter("llmsim_router_policy_fallbacks",
                                 "Decisions for an unhealthy or excluded backend, sent to the least loaded one instead",
                                 registry=r)
        self.policy_errors = Counter("llmsim_router_policy_errors", "Decisions the policy could not make (an error, "
                                     "logged once per message), sent to the least loaded healthy backend", registry=r)
        self.unpriced_decisions = Counter("llmsim_router_unpriced_decisions", "Decisions of a policy that prices "
                                          "backends by their model (qlm, shepherd, routebalance) over a healthy "
                                          "backend it cannot price (logged once), sent to the least loaded healthy "
                                          "backend", registry=r)
        self.unpriced = Gauge("llmsim_router_backend_unpriced", "1 if the policy prices backends by their model and "
                              "cannot price this one (its gpu / llmsim_model are missing or unknown), else 0",
                              ["backend"], registry=r)
        self.stream_errors = Counter("llmsim_router_stream_errors", "Streams cut after the first token (a failure, a "
                                     "stall, garbage, past request_s)",
                                     ["backend"], registry=r)
        self.up = Gauge("llmsim_router_backend_up", "1 if the backend is admitted, 0 if ejected", ["backend"],
                        registry=r)
        self.scrape_failures = Counter("llmsim_router_scrape_failures", "Failed /metrics scrapes", ["backend"],
                                       registry=r)
        self.aborted = Counter("llmsim_router_aborted", "Upstream requests cancelled, by reason (client_gone, stall, "
                               "deadline, ejected)", ["reason"], registry=r)
        self.misconfigured = Gauge("llmsim_router_backend_misconfigured",
                                   "1 if the backend refuses the router's credentials (401 / 403), else 0",
                                   ["backend"], registry=r)
        for b in backends:
            self.decisions.labels(b)
            self.up.labels(b).set(0)
            self.misconfigured.labels(b).set(0)
            self.unpriced.labels(b).set(0)
