"""BBQ tasks: frozen instrument, nested subsets, memberships and the full set."""
