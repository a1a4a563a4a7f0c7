"""Reading checkpoints: the lazy reader, the bulk read engine, region reads, verification and restore's rules.

A room of varstore.checkpoint (docs/architecture.md); its modules are internal and imported by path."""
