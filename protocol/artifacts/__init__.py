"""Content addressing: CIDs exactly as Kubo makes them, stores (local folder, relays, Kubo), manifests
of sharded files, the relay server and the verifying, resumable fetcher. Never imports the chain
layer: a relay's stake check is handed in by whoever starts it."""
