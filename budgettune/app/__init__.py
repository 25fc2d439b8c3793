"""Layer 7: one module per command: a request in, a result out, chaining the stages below;
no option parsing and no tables."""
