"""Writing a checkpoint: plan what is written, snapshot for async saves, the write engine, the overwrite rule.

A room of varstore.checkpoint (docs/architecture.md); its modules are internal and imported by path."""
