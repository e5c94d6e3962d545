"""QLM (One Queue Is All You Need): request groups, virtual queues, the RCT estimator and the plan."""
