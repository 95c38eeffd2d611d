"""CDI API (cdi.kubevirt.io/v1beta1): DataVolume controller, sizes, CDIConfig/StorageProfile/DataSource."""
