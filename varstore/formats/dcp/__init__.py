"""PyTorch Distributed Checkpoint (DCP) directories, one family: the reader (.metadata + .distcp) and the writer through torch.distributed.checkpoint."""
