"""The sweep: budget candidates from the profile, the verification order, and the verdict."""
