"""zoo's runtime, knowing no model or task: topology, mesh, sharding rules, remat/scan, the
training engine, checkpoints, metrics, config, the TPU compiler."""
