"""Admission webhooks on every write: the mutating ones before validation, the
validating ones between validation and storage (``write_path`` lists the order).

``review``: the webhook protocol (rules, namespace/object selectors, failurePolicy, the
AdmissionReview POSTs; mutating webhooks one by one, then validating ones concurrently;
a denial as kube-apiserver's ToStatusErr makes it); ``webhooks``: builds a write's
AdmissionReview request from the store (configurations, namespace labels), resolves
Services to addresses and turns a denial into the client's Status.
"""
