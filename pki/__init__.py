"""Certificate building shared by the cluster (localcluster's CAs) and the controllers
(the host-assisted clone's per-clone CA): a bottom layer that imports nothing of the
project, so both sides use the one CA builder."""
