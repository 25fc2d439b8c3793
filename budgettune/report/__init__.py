"""Layer 6: the self-contained HTML report and the engine config files, from documents alone."""
