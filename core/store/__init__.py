"""Run folders and what they hold, on any storage: a location (local or a bucket), a run
folder's layout and its local working copy, the lease that makes one run its owner,
checkpoints and their manifests."""
