"""Builders of the zoo's generated nets, one module per model family, on caffe.net_spec."""
