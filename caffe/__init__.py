"""Caffe-compatible engine on PyTorch tensors."""
