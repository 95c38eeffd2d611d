"""CDI API (cdi.kubevirt.io/v1beta1): the DataVolume controller, CDIConfig,
StorageProfile and DataSource."""
