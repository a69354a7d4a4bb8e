"""sandboxd's ProcessService messages (process.v1), vendored from agent-sandbox: see process_pb2.py."""
