"""The variable store, the core of varstore: variables, scopes, collections, initializers' TF1 spellings, partitioning, devices and placement.

No file I/O and no checkpoint knowledge (the layers in docs/architecture.md).
Imports nothing itself, so reading a checkpoint never loads the store; the
public names are re-exported by varstore/_core_api.py through `varstore`.
"""
