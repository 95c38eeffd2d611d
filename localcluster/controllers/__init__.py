"""Controllers of the embedded cluster: the plumbing they share (client, informers, a
level-triggered loop) and the workload controllers (Deployment, DaemonSet, Services)."""
