"""GGUF files, one family: the reader by the spec, the writer and the dequantizer through the gguf package."""
