"""Names shared with upstream CDI: annotations, labels, object names (pure constants).

They are the contract with the DataVolume controller (which reads the target PVC's
annotations) and with users' tooling, so they are upstream's strings, not ours. The
few rootdisk extensions are marked as such.
"""

from __future__ import annotations

CDI_GROUP = "cdi.kubevirt.io"
CDI_VERSION = "v1beta1"

# -- annotations on the target PVC (read by the DataVolume controller) ---------------
PREFIX = "cdi.kubevirt.io/"
POD_PHASE = PREFIX + "storage.pod.phase"
POD_RESTARTS = PREFIX + "storage.pod.restarts"
RUNNING = PREFIX + "storage.condition.running"
RUNNING_REASON = RUNNING + ".reason"
RUNNING_MESSAGE = RUNNING + ".message"
PROGRESS = PREFIX + "storage.populator.progress"
PVC_PRIME = PREFIX + "storage.populator.pvcPrime"
PREALLOCATION_APPLIED = PREFIX + "storage.preallocation"

# -- annotations the user or the DataVolume controller sets on the target -------------
IMMEDIATE_BINDING = PREFIX + "storage.bind.immediate.requested"
RETAIN_AFTER_COMPLETION = PREFIX + "storage.pod.retainAfterCompletion"
PRIORITY_CLASS = PREFIX + "storage.pod.priorityclassname"
SELECTED_NODE = "volume.kubernetes.io/selected-node"

# -- annotations on PVC' ---------------------------------------------------------------
POPULATOR_KIND = PREFIX + "storage.populator.kind"
IMPORT_SOURCE = PREFIX + "storage.import.source"
IMPORT_ENDPOINT = PREFIX + "storage.import.endpoint"
IMPORT_SECRET = PREFIX + "storage.import.secretName"
IMPORT_CERT_CONFIGMAP = PREFIX + "storage.import.certConfigMap"
IMPORT_CHECKSUM = PREFIX + "storage.import.checksum"
IMPORT_EXTRA_HEADERS = PREFIX + "storage.import.extraHeaders"
CONTENT_TYPE = PREFIX + "storage.contentType"
PREALLOCATION_REQUESTED = PREFIX + "storage.preallocation.requested"

# -- annotations passed through from the target to the pod ---------------------------
POD_PASSTHROUGH = (
    "k8s.v1.cni.cncf.io/networks",
    "v1.multus-cni.io/default-network",
    "sidecar.istio.io/inject",
    "linkerd.io/inject",
)
CREATED_BY_CONTROLLER = PREFIX + "storage.createdByController"

# -- rootdisk extensions ---------------------------------------------------------------
PREVIOUS_RESTARTS = "populators.rootdisk.io/previous-restarts"
"""On the importer pod: restarts of the pods it replaces (an evicted pod's retries still
count against the retry limit)."""

# -- the clone populator ----------------------------------------------------------------
CLONE_FALLBACK_REASON = PREFIX + "cloneFallbackReason"
CLONE_STRATEGY = PREFIX + "clone.strategy"
"""rootdisk: on the target, the strategy the clone populator chose."""
PRIME_TARGET = "populators.rootdisk.io/target"
"""rootdisk: on a PVC' in another namespace than its target (the source's, for a
cross-namespace clone: owner references cannot cross namespaces), ``ns/name/uid``."""

CLONE_SOURCE_VALUE = "clone-source"
"""The ``cdi.kubevirt.io`` label of the host-assisted clone's source pod."""
CLONE_TARGET_ADDRESS = "populators.rootdisk.io/clone-target-address"
"""rootdisk: on the clone's source pod, the target pod's ``ip:port`` it streams to."""
CLONE_TARGET_RESTARTS = "populators.rootdisk.io/clone-target-restarts"
"""rootdisk: on the clone's source pod, the target container's restart count when it was
made: a target that restarted since waits for a new stream, so the source pod is
replaced."""
CLONE_CA = "populators.rootdisk.io/clone-ca"
"""rootdisk: on the clone's two Secrets, the SHA-256 of their shared per-clone CA."""
CLONE_FOR_DV_LABEL = "cdi.kubevirt.io/clone-for-datavolume"
"""On a VolumeCloneSource the DataVolume controller made: the UID of the DataVolume it
authorised (``cdi.api.CLONE_FOR_DV_LABEL``); in another namespace than its claim, a
source serves only the claim that DataVolume controls."""
CLONE_FOR_CLAIM = "cdi.kubevirt.io/clone-for-claim"
"""On such a VolumeCloneSource: ``namespace/name`` of that DataVolume's claim
(``cdi.api.CLONE_FOR_CLAIM``)."""

# -- labels ----------------------------------------------------------------------------
APP_LABEL = "app"
APP_VALUE = "containerized-data-importer"
COMPONENT_LABEL = "cdi.kubevirt.io"
PROMETHEUS_LABEL = "prometheus.cdi.kubevirt.io"
VELERO_EXCLUDE = "velero.io/exclude-from-backup"

# -- the phases of storage.pod.phase ---------------------------------------------------
PENDING = "Pending"
RUNNING_PHASE = "Running"
SUCCEEDED = "Succeeded"
FAILED = "Failed"


def prime_name(target_uid: str) -> str:
    """PVC' of a target: ``prime-<target uid>`` (deterministic: a restarted operator finds
    the one it made)."""
    return f"prime-{target_uid}"


def importer_pod_name(prime: str) -> str:
    """The importer pod of PVC' ``prime``: ``importer-<PVC' name>`` as upstream."""
    return f"importer-{prime}"


def cloner_pod_name(prime: str) -> str:
    """The host-assisted clone pod of PVC' ``prime``."""
    return f"cloner-{prime}"


def clone_source_pod_name(target_uid: str) -> str:
    """The host-assisted clone's source pod, in the source namespace (upstream's name)."""
    return f"{target_uid}-source-pod"


def clone_secret_names(target_uid: str) -> tuple[str, str]:
    """(target side, source side) Secrets holding the clone's TLS material."""
    return f"clone-target-tls-{target_uid}", f"clone-source-tls-{target_uid}"
