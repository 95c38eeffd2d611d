"""The VM's domain: a typed model built from a VMI and rendered for libvirt or QEMU.

Layout: :mod:`vmi` (typed view of the VMI), :mod:`options` (facts about the pod),
:mod:`configurators` (one pure function per concern), :mod:`model` (the result),
:mod:`render_libvirt` (domain XML via xml.etree), :mod:`render_qemu` (argv),
:mod:`hostdisk` (sizing a missing disk.img as upstream's HostDisk).
"""
