"""One module per command, chaining the stages of that command; no parsing, no table printing."""
