"""Layer 1 (beside trace): the step-time model and what calibrates it: the roofline, the ridge
fit, the step-time fit, and the profile document (profile.json) they are read from."""
