"""Command-line tools: the `caffe` command (cli.py and one module per action), the proto
upgraders (upgrade_net_proto_text/binary, upgrade_solver_proto_text) and parse_log."""
