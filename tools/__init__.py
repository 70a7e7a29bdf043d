"""Developer tools run by the Makefile."""
