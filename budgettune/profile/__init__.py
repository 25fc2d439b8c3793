"""profile stage."""
