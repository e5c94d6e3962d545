"""The cluster: instances behind a router, its clock, the public ClusterState and the driver API."""
