"""Keras weights, one family: Keras 3 .weights.h5 and .keras archives, legacy Keras 2 .h5, and sharded weights."""
