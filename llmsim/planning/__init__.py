"""Planning: capacity search and the cheapest deployment that meets the SLOs."""
