"""One module per peer: ``load(spec) -> Peer`` (see common.py)."""
