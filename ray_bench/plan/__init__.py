"""Plans: compile, identity, receipt, store."""
