"""Managed directories of numbered checkpoints: CheckpointManager, its latest pointer, retention and listing.

A room of varstore.checkpoint (docs/architecture.md); its modules are internal and imported by path."""
