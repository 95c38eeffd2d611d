"""The upload server (``python -m importer.uploadserver``, image ``rootdisk/uploadserver``):
one per uploading volume, on PVC', reached only through the upload proxy.

Upstream's API: ``POST|PUT /v1beta1/upload`` (answers when the disk is written),
``/v1beta1/upload-async`` (answers when the body has arrived), the multipart
``/v1beta1/upload-form[-async]`` (field ``file``), the ``v1alpha1`` aliases, and
``GET /healthz`` for the readiness probe. HTTPS with the server's own certificate;
upload requests must present the proxy's client certificate (signed by the CA in
``ca.crt``, common name ``UPLOAD_CLIENT_NAME``), as upstream's server checks.

The bytes are converted as they arrive by the importer's processor (qcow2 → raw sparse,
raw and compressed raw straight in; the size is checked from the header before the bulk
of the body), see :mod:`importer.uploadsource`. One upload at a time; success ends the
program (exit 0, termination message ``Completed``), a bad image ends it for good
(exit 2, the importer's termination message: TooSmall, InvalidImage, …), a client
that goes away leaves the server ready for another try, the partial disk wiped.
"""
