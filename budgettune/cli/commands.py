"""Imports every command module so each registers itself on the app."""

from budgettune.cli import (
    profile,  # noqa: F401
    replay,  # noqa: F401
    report,  # noqa: F401
    roofline,  # noqa: F401
    serve,  # noqa: F401
    simulate,  # noqa: F401
    sweep,  # noqa: F401
    tiny_model,  # noqa: F401
    trace,  # noqa: F401
)
