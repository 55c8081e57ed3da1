"""The `crucible` command line: parses arguments and calls into protocol/, node/ and validator/."""
