"""PyTorch torch.save files, one family: the reader through the restricted unpickler, the writer without torch, the unpickled tree's flattening."""
