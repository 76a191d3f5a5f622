"""modelgate: a self-hosted LLM API gateway."""

__version__ = "0.1.0"
