"""StorageClasses, the local dynamic provisioner and the PV binder."""
