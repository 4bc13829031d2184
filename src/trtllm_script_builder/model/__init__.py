"""The data the tool reads and writes: the request, the cluster description, the site config and the job spec."""
