"""The live router (``llmsim-router``): an OpenAI-compatible gateway that routes real traffic with an llmsim
heuristic or an exported policy, over backends whose state it reads from their vLLM ``/metrics``
(docs/serving.md). Its modules, in the order a request meets them:

* ``cli`` - the ``llmsim-router`` command; loads without the ``serve`` extra (``--help``, a missing extra named);
* ``config`` - the router's YAML file, validated (``RouterConfig`` and its groups on ``llmsim.schema.Schema``), its
  secrets, and ``redact``, which takes them out of any text the router shows;
* ``runner`` - serving in the foreground (the CLI) or in a background thread (tests, notebooks);
* ``departure`` - noticing a client that leaves, so that its upstream request is cancelled;
* ``app`` - the HTTP routes (FastAPI): OpenAI completions and chat, ``/v1/models``, ``/health``, ``/metrics``;
  the bearer token (every route but ``/health`` when there is an ``api_key``), redacted error answers;
* ``inbound`` - checking a client's request: a clear 4xx, or what the policy needs to know of it;
* ``gateway`` - the core: admission, one decision per request (holding on WAIT), retries elsewhere;
* ``upstream`` - the wire towards the backends: one attempt, and the relay of a stream;
* ``decider`` - the ``Decider``: any llmsim router, or an exported one, on a view of the live cluster state;
* ``tracker`` - each backend's last scrape plus the router's in-flight work, as the public ``ClusterState``;
* ``monitor`` - discovery, health checks and scrapes of every backend in the background (a backend refusing the
  router's credentials is reported misconfigured);
* ``scrape`` - reading vLLM's ``/metrics`` and ``/v1/models`` answers;
* ``metrics`` - the router's own Prometheus metrics.
"""
