"""Command-line tools: the `caffe` command (cli.py and one module per action), the proto
upgraders (upgrade_net_proto_text/binary, upgrade_solver_proto_text, sharing upgrade_common)
and parse_log."""
