"""Caffe's protobuf schema; `caffe_pb2` is generated at build time from caffe.proto."""
