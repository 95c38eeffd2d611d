"""Validating admission for VirtualMachines and VMIs (served by ``vm.api``, as virt-api
serves upstream's): pure rules in ``vmi_rules``/``vm_rules``, the AdmissionReview
protocol in ``review``."""
