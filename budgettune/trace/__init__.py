"""Traces: read request-length and arrival data, synthesize it, and turn it into a send schedule."""
