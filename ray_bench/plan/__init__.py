"""Plans: compile, identity, store (the receipt and `execute`'s check of a plan are in `ray_bench.commands`)."""
