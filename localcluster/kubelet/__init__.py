"""The node: runs pods, whose images stand for programs of the host (the image table the
cluster is given), as sandboxed processes."""
