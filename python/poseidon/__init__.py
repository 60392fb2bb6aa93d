"""Poseidon: distributed communication for the Caffe engine."""
