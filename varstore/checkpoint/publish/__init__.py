"""Making a written checkpoint visible: temporaries, fsync and rename locally; the manifest-last commit on an object store.

A room of varstore.checkpoint (docs/architecture.md); its modules are internal and imported by path."""
