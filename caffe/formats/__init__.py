"""Caffe's files, read and written both ways: prototxt and binary protobuf (proto_io), blobs
and their legacy shapes (blob_proto), .caffemodel and HDF5 weights (weights_io), whole nets
(net_io), protobuf's wire format read directly for large files (wire), the upgrade chain
of legacy nets (upgrade, upgrade_v0), and writes that never leave half a file
(atomic_write)."""
