"""The node handler (KubeVirt's virt-handler), one per node (DaemonSet).

It asks each launcher on its node for the domain's state over the launcher's control
socket and turns it into the VMI's phase (``phases``), asks launchers of deleted VMIs
to shut down with the VMI's current grace period, and serves the serial console to
virt-api over mutually authenticated TLS (``console``).

How it reaches the sockets: launchers put ``<vmi uid>.sock`` into the node's
``/var/run/kubevirt/sockets`` (a hostPath in both pods). The handler's init container
makes that directory ``root:107`` mode ``1770``: only root and gid 107 (the launchers
and the handler, which runs as 107 without capabilities) can enter it, and the sticky
bit keeps one launcher from removing another's socket. This works the same on a real
node and on localcluster (whose kubelet lays out pod directories differently, so
upstream's way through the kubelet's pods directory would not). The price: launchers
share a uid, so a launcher could connect to another launcher's socket on the same node;
upstream's per-pod emptyDir avoids that.
"""
