"""Prefix-aware routing: llm-d-style scorers and the routers built on them."""
