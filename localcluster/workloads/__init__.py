"""The workload controllers (Deployments, ReplicaSets, DaemonSets) and applying the
manifests that install workloads, built on the ground floor (localcluster/kube/) alone."""
