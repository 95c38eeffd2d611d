"""Image sources behind one protocol, one module each, chosen from a registry."""
