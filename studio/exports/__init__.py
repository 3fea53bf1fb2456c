"""Training data out of the studio: the steps of a dataset (or a branch) as rows of the
formats trainers read. `examples` holds what one row is made from, `formats` the shapes.
Plain Python (no Django): the services build the examples from the database."""
