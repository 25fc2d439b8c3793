"""Layer 4 (beside tune): time engine iterations against token count (the profile step)."""
