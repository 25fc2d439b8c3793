"""Layer 4 (beside profiling): the sweep's decisions: candidates, predictions, the search order,
early stop, goodput, and the choice with its reasons, over typed points."""
