"""Volume populators (import, clone, upload) and the twin-PVC (PVC') flow."""
