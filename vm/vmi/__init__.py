"""The VirtualMachineInstance controller: the launcher pod and the VMI's phase.

Pure parts: ``overhead`` (memory), ``claims`` (what the volumes need), ``pod`` (the
launcher pod and the temporary binding pod), ``lifecycle`` (phase and conditions).
``kube`` talks to the API; ``handlers`` is the kopf wiring.
"""
