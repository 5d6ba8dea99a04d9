"""zoo's model-agnostic runtime: topology, mesh, sharding rules, remat/scan, config."""
