"""What tasks train on (zoo/tasks holds the objectives): sources read, tokenized, cached and
packed into each host's fixed-shape batches, and the data sets the project ships (assets/)."""
