"""`crucible demo`: every role as a separate process on a private devnet."""
