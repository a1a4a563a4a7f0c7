"""TensorFlow checkpoints (V2 tensor bundles), one family: the reader, the writer and the bundle's byte-level parsers (.index table, protobuf messages)."""
