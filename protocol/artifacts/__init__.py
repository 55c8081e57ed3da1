"""Content-addressed artifacts: stores, checkpoint and update manifests, the relay network."""
