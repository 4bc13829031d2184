"""Writing a build: the one atomic writer and the report."""
