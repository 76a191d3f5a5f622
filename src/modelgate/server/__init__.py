"""The HTTP server: the ASGI application with its one route table, and how it is run."""
