"""KubeVirt API (kubevirt.io/v1): VM and VMI controllers, domain model, launcher."""
