"""Layer 3 (beside engines): the load generator: send schedule on time, stream tokens, record."""
