"""BVLC Caffe's protobuf schema; `caffe_pb2` is generated from caffe.proto at build time."""
