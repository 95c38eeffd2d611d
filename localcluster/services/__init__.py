"""Services: clusterIPs, Endpoints, and resolving a Service for the API server; built on
the ground floor (localcluster/kube/) alone."""
