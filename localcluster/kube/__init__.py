"""The node side's ground floor: what the kubelet, the storage controller and the
workload controllers all build on, with one home each (the API client itself is
:class:`kubeclient.Client`, and its resources are :mod:`kubeclient.resources`).

- informer.py: informers and the level-triggered controller loop;
- events.py: recording Events (``kubectl describe``);
- addresses.py: 127.x.y.z address pools for pods and Services;
- times.py: the API's timestamp formats;
- claims.py: the claim annotations the scheduler and the provisioner share.

It imports nothing else of localcluster, so everything above it can use it freely.
"""
