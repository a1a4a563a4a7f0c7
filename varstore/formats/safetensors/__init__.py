"""Safetensors, one family: single .safetensors files and HuggingFace sharded safetensors (index + shards), read and written."""
