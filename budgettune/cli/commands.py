"""Imports every command module so each registers itself on the app."""

from budgettune.cli import roofline  # noqa: F401
from budgettune.cli import tiny_model  # noqa: F401
from budgettune.cli import trace  # noqa: F401
