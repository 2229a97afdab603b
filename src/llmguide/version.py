"""The package version (its own module: the kernel reads it without importing the package root)."""

__version__ = "0.1.0"
