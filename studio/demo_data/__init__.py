"""Demo trajectories (generated files) and the code that writes them."""
