"""The package version, in a module of its own so that no module imports the root."""

__version__ = "0.1.0"
