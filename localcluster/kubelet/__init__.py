"""The node: runs pods whose images are rootdisk's programs as sandboxed processes."""
