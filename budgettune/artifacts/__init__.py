"""Layer 5: the documents budgettune writes and reads back (results.json, recommendation.json,
sweep.json, points.jsonl), each in one place, validated on read."""
