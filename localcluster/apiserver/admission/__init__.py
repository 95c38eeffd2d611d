"""Admission webhooks, the step between validation and storage on every write.

``review``: the webhook protocol (rules, namespace/object selectors, failurePolicy, the
AdmissionReview POSTs; mutating webhooks one by one, then validating ones concurrently);
``webhooks``: builds a write's AdmissionReview request from the store (configurations,
namespace labels) and resolves Services to addresses.
"""
