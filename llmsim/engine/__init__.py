"""One serving instance: the iteration loop, its batch policies, KV and prefix caches, and its features."""
