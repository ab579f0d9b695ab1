"""haggler: train small language models to negotiate as sellers, and measure whether they learned."""

__version__ = "0.1.0"
