"""`budgettune roofline`: placeholder replaced below."""
