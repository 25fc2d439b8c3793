"""The typed reads of a document moved to :mod:`budgettune.core.fields` (the profile and a
model's config.json, below this layer, read with them too); re-exported here so that code
importing them from the artifacts keeps working."""

from budgettune.core.fields import Fields, check_schema, read_json_object

__all__ = ["Fields", "check_schema", "read_json_object"]
