"""The node handler (KubeVirt's virt-handler), one per node (DaemonSet).

It asks each launcher on its node for the domain's state over the launcher's control
socket and turns it into the VMI's phase (``phases``), asks launchers of deleted VMIs
to shut down with the VMI's current grace period, and serves the serial console to
virt-api over mutually authenticated TLS (``console``).

How it reaches the sockets: each launcher pod mounts its VMI's own directory of the
node, ``/var/run/kubevirt/sockets/<vmi uid>`` (hostPath), and listens on
``<vmi uid>.sock`` in it; the handler mounts the whole ``/var/run/kubevirt/sockets``,
which its init container makes ``root:107`` mode ``0770`` (the handler runs as uid/gid
107 without capabilities). The handler makes each VMI's directory (``sockets``) before
the launcher pod can start, as the pod waits for it, so a launcher sees no other VMI's
socket and cannot reach, remove or replace one. The handler connects without following
symlinks (a launcher could put one in its own directory) and bounds each call in time.
This works the same on a real node and on localcluster (whose kubelet lays out pod
directories differently, so upstream's per-pod emptyDir found through the kubelet's pods
directory would not).
"""
