"""What a checkpoint is on disk: the manifest, index header, layout, packed blob, checksums and entries.

A room of varstore.checkpoint (docs/architecture.md); its modules are internal and imported by path."""
