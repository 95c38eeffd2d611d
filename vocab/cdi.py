"""Names of the cdi.kubevirt.io API: group, kinds, annotations, labels, phases.

Spelled as upstream CDI spells them, because users' manifests, KubeVirt and tools such
as virtctl read and write the same strings; the few rootdisk extensions are marked.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "cdi.kubevirt.io"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

UPLOAD_GROUP: Final = "upload.cdi.kubevirt.io"
"""The aggregated API of upload tokens (``UploadTokenRequest``, same version)."""
UPLOAD_API_VERSION: Final = f"{UPLOAD_GROUP}/{VERSION}"
UPLOAD_TOKEN_KIND: Final = "UploadTokenRequest"  # noqa: S105 - a kind
UPLOAD_TOKEN_PLURAL: Final = "uploadtokenrequests"  # noqa: S105 - a resource

DV_KIND: Final = "DataVolume"
DV_PLURAL: Final = "datavolumes"

CONFIG_NAME: Final = "config"
"""The one cluster-scoped CDIConfig."""
CDI_NAMESPACE: Final = "rootdisk"
"""Where the CDI programs run unless their pod says otherwise (POD_NAMESPACE)."""
UPLOAD_PROXY_SERVICE: Final = "cdi-uploadproxy"

# annotations on DataVolumes and PVCs
ANN: Final = "cdi.kubevirt.io/"
IMMEDIATE_BINDING: Final = ANN + "storage.bind.immediate.requested"
ALLOW_CLAIM_ADOPTION: Final = ANN + "allowClaimAdoption"
POD_RETAIN: Final = ANN + "storage.pod.retainAfterCompletion"
POD_PHASE: Final = ANN + "storage.pod.phase"
POD_RESTARTS: Final = ANN + "storage.pod.restarts"
RUNNING: Final = ANN + "storage.condition.running"
RUNNING_REASON: Final = ANN + "storage.condition.running.reason"
RUNNING_MESSAGE: Final = ANN + "storage.condition.running.message"
POPULATOR_PROGRESS: Final = ANN + "storage.populator.progress"
PVC_PRIME: Final = ANN + "storage.populator.pvcPrime"
CONTENT_TYPE: Final = ANN + "storage.contentType"
PREALLOCATION_REQUESTED: Final = ANN + "storage.preallocation.requested"
CREATED_FOR_DV: Final = ANN + "createdForDataVolume"
POPULATED_FOR: Final = ANN + "storage.populatedFor"
USE_POPULATOR: Final = ANN + "storage.usePopulator"
MINIMUM_PVC_SIZE: Final = ANN + "minimumSupportedPvcSize"
CLONE_STRATEGY_ANN: Final = ANN + "clone-strategy"
PREALLOCATION_APPLIED: Final = ANN + "storage.preallocation"
PRIORITY_CLASS: Final = ANN + "storage.pod.priorityclassname"
CREATED_BY_CONTROLLER: Final = ANN + "storage.createdByController"

# annotations on PVC' (the populators' own claim)
POPULATOR_KIND: Final = ANN + "storage.populator.kind"
IMPORT_SOURCE: Final = ANN + "storage.import.source"
IMPORT_ENDPOINT: Final = ANN + "storage.import.endpoint"
IMPORT_SECRET: Final = ANN + "storage.import.secretName"
IMPORT_CERT_CONFIGMAP: Final = ANN + "storage.import.certConfigMap"
REGISTRY_IMPORT_METHOD: Final = ANN + "storage.import.registryImportMethod"
REGISTRY_IMAGE_ARCHITECTURE: Final = ANN + "storage.import.registryImageArchitecture"
IMPORT_CHECKSUM: Final = ANN + "storage.import.checksum"
IMPORT_EXTRA_HEADERS: Final = ANN + "storage.import.extraHeaders"

POD_PASSTHROUGH: Final = (
    "k8s.v1.cni.cncf.io/networks",
    "v1.multus-cni.io/default-network",
    "sidecar.istio.io/inject",
    "linkerd.io/inject",
)
"""Annotations passed from the target claim to the importer pod, as upstream."""

SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
DEFAULT_CLASS: Final = "storageclass.kubernetes.io/is-default-class"
DEFAULT_VIRT_CLASS: Final = "storageclass.kubevirt.io/is-default-virt-class"
OVERHEAD_CLASS_ANNOTATION: Final = "localcluster.rootdisk.io/filesystem-overhead"
"""rootdisk extension: a StorageClass states its measured filesystem overhead."""
FILL_ALERT_LABEL: Final = "alerts.k8s.io/KubePersistentVolumeFillingUp"

APP_LABEL: Final = "app"
APP_LABEL_VALUE: Final = "containerized-data-importer"
COMPONENT_LABEL: Final = "cdi.kubevirt.io"
PROMETHEUS_LABEL: Final = "prometheus.cdi.kubevirt.io"
VELERO_EXCLUDE: Final = "velero.io/exclude-from-backup"

PERMISSIVE_CLONE: Final = ANN + "permissiveClone"
CLONE_FALLBACK_REASON: Final = ANN + "cloneFallbackReason"
CLONE_REQUESTER: Final = ANN + "storage.clone.requester"
"""Who created a DataVolume (JSON: username, uid, groups), written by the mutating webhook
at admission and never accepted from the user; upstream keeps a signed token instead."""
CLONE_FOR_DV_LABEL: Final = ANN + "clone-for-datavolume"
"""rootdisk: on a VolumeCloneSource in another namespace, the DataVolume's UID."""
CLONE_FOR_CLAIM: Final = ANN + "clone-for-claim"
"""rootdisk: on a VolumeCloneSource in another namespace, ``namespace/name`` of the claim
it was authorised for (the DataVolume's own claim)."""
CLONE_STRATEGY: Final = ANN + "clone.strategy"
"""rootdisk: on the target, the strategy the clone populator chose."""
CLONE_SOURCE_VALUE: Final = "clone-source"
"""The ``cdi.kubevirt.io`` label of the host-assisted clone's source pod."""

# rootdisk extensions of the populators
ROOTDISK_POPULATORS: Final = "populators.rootdisk.io/"
PREVIOUS_RESTARTS: Final = ROOTDISK_POPULATORS + "previous-restarts"
"""On the importer pod: restarts of the pods it replaces (an evicted pod's retries still
count against the retry limit)."""
PRIME_TARGET: Final = ROOTDISK_POPULATORS + "target"
"""On a PVC' in another namespace than its target (the source's, for a cross-namespace
clone: owner references cannot cross namespaces), ``ns/name/uid``."""
CLONE_TARGET_ADDRESS: Final = ROOTDISK_POPULATORS + "clone-target-address"
"""On the clone's source pod, the target pod's ``ip:port`` it streams to."""
CLONE_TARGET_RESTARTS: Final = ROOTDISK_POPULATORS + "clone-target-restarts"
"""On the clone's source pod, the target container's restart count when it was made: a
target that restarted since waits for a new stream, so the source pod is replaced."""
CLONE_CA: Final = ROOTDISK_POPULATORS + "clone-ca"
"""On the clone's two Secrets, the SHA-256 of their shared per-clone CA."""

IMPORT_SOURCE_KIND: Final = "VolumeImportSource"
IMPORT_SOURCE_PREFIX: Final = "volume-import-source-"
CLONE_SOURCE_KIND: Final = "VolumeCloneSource"
CLONE_SOURCE_PREFIX: Final = "volume-clone-source-"
UPLOAD_SOURCE_KIND: Final = "VolumeUploadSource"
UPLOAD_SOURCE_PREFIX: Final = "volume-upload-source-"
POD_READY: Final = ANN + "storage.pod.ready"
"""On an upload target: the upload server is ready (written by the upload populator)."""
UPLOAD_REQUEST: Final = ANN + "storage.upload.target"
"""On a PVC (without a DataVolume): upload into it (``rootdisk image-upload pvc``)."""

# DataVolume phases (and, for Pending/Running/Succeeded/Failed, storage.pod.phase's)
PENDING: Final = "Pending"
RUNNING_PHASE: Final = "Running"
WAIT_FOR_FIRST_CONSUMER: Final = "WaitForFirstConsumer"
PENDING_POPULATION: Final = "PendingPopulation"
IMPORT_SCHEDULED: Final = "ImportScheduled"
IMPORT_IN_PROGRESS: Final = "ImportInProgress"
CLONE_SCHEDULED: Final = "CloneScheduled"
UPLOAD_SCHEDULED: Final = "UploadScheduled"
UPLOAD_READY: Final = "UploadReady"
CLONE_IN_PROGRESS: Final = "CloneInProgress"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
SNAPSHOT_FOR_SMART_CLONE_IN_PROGRESS: Final = "SnapshotForSmartCloneInProgress"
CLONE_FROM_SNAPSHOT_SOURCE_IN_PROGRESS: Final = "CloneFromSnapshotSourceInProgress"
REBIND_IN_PROGRESS: Final = "RebindInProgress"

# clones from a VolumeSnapshot (upstream's snapshot-clone controller and clone planner)
SNAPSHOT_API_GROUP: Final = "snapshot.storage.k8s.io"
VOLUME_SNAPSHOT_KIND: Final = "VolumeSnapshot"
CLONE_PHASE: Final = ANN + "clonePhase"
"""On a clone's target: the clone populator's step (upstream's ``AnnClonePhase``)."""
CLONE_PHASE_SNAPSHOT: Final = "Snapshot"
"""Taking the temporary snapshot of a source claim (DataVolume phase
SnapshotForSmartCloneInProgress)."""
CLONE_PHASE_SNAPSHOT_CLONE: Final = "SnapshotClone"
"""Restoring a snapshot into PVC', or into the temporary claim a host-assisted copy reads
(DataVolume phase CloneFromSnapshotSourceInProgress)."""
CLONE_PHASE_HOST_CLONE: Final = "HostClone"
"""Copying by the host-assisted pods (DataVolume phase CloneInProgress)."""
CLONE_WITHOUT_SOURCE: Final = "CloneWithoutSource"
MESSAGE_CLONE_WITHOUT_SOURCE: Final = "The source {kind} {name} doesn't exist"
"""``kind`` is ``pvc`` or ``snapshot``."""
CLONE_VALIDATION_FAILED: Final = "CloneValidationFailed"
MESSAGE_CLONE_VALIDATION_FAILED: Final = "The clone doesn't meet the validation requirements: {}"
MESSAGE_SMART_CLONE_IN_PROGRESS: Final = (
    "Creating snapshot for smart-clone is in progress (for pvc {namespace}/{name})")
MESSAGE_CLONE_FROM_SNAPSHOT_SOURCE_IN_PROGRESS: Final = (
    "Creating PVC from snapshot source is in progress (for {kind} {namespace}/{name})")
MESSAGE_REBIND_IN_PROGRESS: Final = (
    "Rebinding PersistentVolumeClaim for DataVolume {namespace}/{name}")
NO_PROVISIONER_MATCH: Final = "NoProvisionerMatch"
MESSAGE_NO_PROVISIONER_MATCH: Final = (
    "The storageclass provisioner does not match the volumesnapshotcontent driver")
INCOMPATIBLE_VOLUME_MODES: Final = "IncompatibleVolumeModes"
MESSAGE_INCOMPATIBLE_VOLUME_MODES: Final = "The volume modes of source and target are incompatible"
NO_VOLUME_EXPANSION: Final = "NoVolumeExpansion"
MESSAGE_NO_VOLUME_EXPANSION: Final = "No volume expansion is possible"

# DataSource Ready condition (upstream's datasource controller)
DATA_SOURCE_READY_MESSAGE: Final = "DataSource is ready to be consumed"
SNAPSHOT_NOT_FOUND_MESSAGE: Final = "Snapshot not found"
SNAPSHOT_NOT_READY: Final = "SnapshotNotReady"
SNAPSHOT_NOT_READY_MESSAGE: Final = "Snapshot phase is not ready"

# DataImportCron (upstream's dataimportcron-controller.go, common.go)
DATAIMPORTCRON_KIND: Final = "DataImportCron"
DATAIMPORTCRON_PLURAL: Final = "dataimportcrons"
CRON_LABEL: Final = "cdi.kubevirt.io/dataImportCron"
"""On the DataVolumes, claims and DataSource a cron manages: the cron's name."""
CRON_CLEANUP_LABEL: Final = CRON_LABEL + ".cleanup"
"""``"true"`` with ``retentionPolicy: None``: deleted with the cron."""
SOURCE_DESIRED_DIGEST: Final = ANN + "storage.import.sourceDesiredDigest"
NEXT_CRON_TIME: Final = ANN + "storage.import.nextCronTime"
"""RFC 3339; a time in the past makes the next reconcile poll."""
LAST_CRON_TIME: Final = ANN + "storage.import.lastCronTime"
LAST_USE_TIME: Final = ANN + "storage.import.lastUseTime"
"""RFC 3339 with nanoseconds, UTC: garbage collection keeps the most recently used."""
CRON_UP_TO_DATE: Final = "UpToDate"
CRON_PROGRESSING: Final = "Progressing"
SOURCE_VOLUME_MODE: Final = ANN + "storage.import.sourceVolumeMode"
"""On a cron's VolumeSnapshot: the volume mode of the claim it was taken of."""
SNAPSHOT_CLASS_FOR_CRON: Final = ANN + "snapshotClassForDataImportCron"
"""On a StorageProfile: the VolumeSnapshotClass for DataImportCron snapshots."""
